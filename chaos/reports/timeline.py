"""One picture per test: request lanes coloured by outcome, fault windows shaded, and the
key gauges on the same time axis (matplotlib, written as PNG)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from chaos.observe.history import History
from chaos.observe.pipeline import PIPELINE
from chaos.observe.records import FaultEvent, Outcome, Sample, Stage
from chaos.system.topology import is_engine, kind_of

__all__ = ["render_timeline"]

COLORS = {
    Outcome.OK: "#2e7d32",
    Outcome.CLEAN_ERROR: "#f9a825",
    Outcome.TRUNCATED: "#6a1b9a",
    Outcome.STALLED: "#c62828",
    Outcome.CLIENT_TIMEOUT: "#d84315",
    Outcome.CONNECTION_ERROR: "#455a64",
    Outcome.HUNG_UP: "#90a4ae",
    None: "#000000",
}


def _fault_windows(history: History) -> list[tuple[float, float | None, str]]:
    starts: dict[str, tuple[float, str]] = {}
    out = []
    for f in history.of(FaultEvent):
        if f.stage is Stage.INJECT:
            starts[f.fault] = (f.t, f.description)
        elif f.stage is Stage.HEALED and f.fault in starts:
            t0, desc = starts.pop(f.fault)
            out.append((t0, f.t, desc))
    out += [(t0, None, desc) for t0, desc in starts.values()]
    return out


def render_timeline(history: History, path: Path, *, title: str = "") -> Path:
    ops = history.ops()
    end = history.end_t()
    fig, (lanes, gauges) = plt.subplots(2, 1, figsize=(12, 7), sharex=True, gridspec_kw={"height_ratios": [3, 2]})
    for i, op in enumerate(ops):
        stop = op.complete.t if op.complete else end
        color = COLORS[op.outcome]
        lanes.barh(
            i,
            stop - op.invoke.t,
            left=op.invoke.t,
            height=0.7,
            color=color,
            hatch=None if op.complete else "//",
            edgecolor="black" if op.complete is None else color,
        )
        if op.complete and op.complete.first_byte_t is not None:
            lanes.plot([op.complete.first_byte_t], [i], marker="|", color="white", markersize=6)
    for t0, t1, desc in _fault_windows(history):
        for ax in (lanes, gauges):
            ax.axvspan(t0, t1 if t1 is not None else end, color="#ef5350", alpha=0.15)
        lanes.text(t0, len(ops) + 0.3, desc, fontsize=7, color="#b71c1c", va="bottom")
    lanes.set_ylabel("requests")
    lanes.set_ylim(-1, max(len(ops), 1) + 1.5)
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for o, c in COLORS.items() if o is not None]
    lanes.legend(handles, [o.value for o in COLORS if o is not None], fontsize=7, loc="upper left", ncol=6)
    engines = sorted({s.source for s in history.of(Sample) if is_engine(s.source)})
    for hop in PIPELINE:
        if hop.gauge is None:
            continue
        # every engine of the hop's kind (a topology's second one too), named where there are two
        kin = [e for e in engines if kind_of(e) == hop.service] or [hop.service]
        for engine in kin:
            series = history.series(engine, hop.gauge.name)
            if series:
                ts, vs = zip(*series, strict=True)
                label = f"{engine}: {hop.label}" if len(kin) > 1 else hop.label
                gauges.step(ts, vs, where="post", label=label, linewidth=1.2)
    gauges.set_ylabel("gauge value")
    gauges.set_xlabel("seconds since the test began")
    if gauges.get_legend_handles_labels()[0]:
        gauges.legend(fontsize=7, loc="upper right", ncol=3)
    else:
        gauges.text(
            0.5, 0.5, "no metric samples (missing, not zero)", transform=gauges.transAxes, ha="center", color="grey"
        )
    fig.suptitle(title or "timeline", fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
