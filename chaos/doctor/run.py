"""``pdchaos doctor``: a read-only live look at a running deployment.

Samples every engine's and the router's metrics at 20 Hz (one thread per source, so a
frozen engine cannot slow the others) over a window; reads the logs for requests started
and not finished; with ``probe``, sends one fresh short request straight to the router
(and one through the client's path when that differs) after the window; then names the
most likely location of a stuck request, with its evidence. It never injects a fault.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chaos.clients.client import Client, Deadlines
from chaos.doctor.hops import HOPS, Diagnosis, HopStats, diagnose, hop_stats
from chaos.doctor.openreqs import open_requests
from chaos.observe.history import History
from chaos.observe.records import Phase, Sample
from chaos.observe.sampler import Sampler, metrics_urls
from chaos.targets.base import Target

__all__ = ["DoctorReport", "run_doctor", "write_report"]

INTERVAL_S = 0.05
_PROBE = Deadlines(connect_s=2.0, read_s=5.0, stall_s=5.0, total_s=10.0)


@dataclass
class DoctorReport:
    target: str
    window_s: float
    interval_s: float
    stats: list[HopStats]
    unreachable: dict[str, str]
    open_requests: dict[str, list[str]]
    probes: dict[str, dict[str, Any]]
    diagnosis: Diagnosis
    started_wall: float
    samples: dict[str, int] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "started": time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(self.started_wall)),
            "window_s": self.window_s,
            "interval_s": self.interval_s,
            "samples": self.samples,
            "hops": [s.to_json() for s in self.stats],
            "unreachable": self.unreachable,
            "open_requests": self.open_requests,
            "probes": self.probes,
            "diagnosis": {
                "location": self.diagnosis.location,
                "state": self.diagnosis.state,
                "evidence": self.diagnosis.evidence,
                "line": self.diagnosis.line(),
            },
        }


def _probe(url: str) -> dict[str, Any]:
    """One fresh short request; its outcome and latency."""
    client = Client(url, History(), _PROBE)
    t0 = time.monotonic()
    try:
        reply = client.request(
            "/generate", {"text": "pdchaos doctor probe", "sampling_params": {"max_new_tokens": 2}}, phase=Phase.PROBE
        )
    finally:
        client.close()
    return {
        "url": url,
        "ok": reply.ok,
        "outcome": reply.outcome.value,
        "seconds": round(time.monotonic() - t0, 3),
        "error": reply.error[:200],
    }


def run_doctor(
    target: Target,
    *,
    window_s: float = 10.0,
    probe: bool = False,
    logs_since: float | None = None,
    interval_s: float = INTERVAL_S,
) -> DoctorReport:
    e = target.info.endpoints
    urls = {name: url for name, url in metrics_urls(e).items() if name != "toxiproxy"}  # the hops' own sources
    history = History()
    started = time.time()
    sampler = Sampler(history, urls, interval_s=interval_s).start()
    try:
        time.sleep(window_s)  # the window itself: sampling runs on the sampler's threads
    finally:
        sampler.stop()

    samples = {name: sum(1 for s in history.of(Sample) if s.source == name) for name in urls}
    unreachable = {
        name: f"{len(sampler.failures[name])} of {len(sampler.failures[name]) + samples[name]} scrapes failed"
        for name in ("router", *target.info.topology.engines)
        if samples[name] == 0
    }
    stats = [
        hop_stats(h, history.series(h.service, h.gauges[0]), {c: history.series(h.service, c) for c in h.progress})
        for h in HOPS
    ]  # HOPS: hops with a gauge

    since = logs_since if logs_since is not None else started - 600.0
    logs = {}
    for service in ("router", "prefill", "decode"):  # the first pair's: the hops' statistics are theirs
        try:
            logs[service] = target.logs(service)
        except Exception:  # logs are evidence when reachable, never a reason to fail the look
            continue
    opened = open_requests(logs, since)

    probes: dict[str, dict[str, Any]] = {}
    if probe:
        probes["router"] = _probe(e["router"])
        if e["client"] != e["router"]:
            probes["client"] = _probe(e["client"])

    diagnosis = diagnose(stats, unreachable=unreachable, probes=probes, open_requests=opened)
    return DoctorReport(
        target.info.kind, window_s, interval_s, stats, unreachable, opened, probes, diagnosis, started, samples=samples
    )


def write_report(report: DoctorReport, reports_dir: Path) -> Path:
    """reports/doctor-<time>/: doctor.json and timeline.png (each hop's gauge over the window)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    folder = Path(reports_dir) / f"doctor-{time.strftime('%Y%m%d-%H%M%S', time.localtime(report.started_wall))}"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "doctor.json").write_text(json.dumps(report.to_json(), indent=2))
    fig, axes = plt.subplots(len(report.stats), 1, figsize=(10, 1.4 * len(report.stats)), sharex=True)
    for ax, st in zip(axes, report.stats, strict=True):
        if st.series:
            ax.step(
                [t for t, _ in st.series],
                [v for _, v in st.series],
                where="post",
                color="tab:red" if st.verdict == "stuck" else "tab:blue",
            )
        else:
            ax.text(0.5, 0.5, "no samples", transform=ax.transAxes, ha="center", va="center", color="grey")
        ax.set_ylabel(st.hop.replace(" ", "\n"), rotation=0, ha="right", va="center", fontsize=8)
        ax.set_ylim(bottom=0)
        ax.text(1.01, 0.5, f"{st.shape}\n{st.verdict}", transform=ax.transAxes, fontsize=8, va="center")
    axes[-1].set_xlabel(f"seconds into the window ({1 / report.interval_s:.0f} Hz)")
    fig.suptitle(report.diagnosis.line()[:150], fontsize=9)
    fig.tight_layout()
    fig.savefig(folder / "timeline.png", dpi=90)
    plt.close(fig)
    return folder
