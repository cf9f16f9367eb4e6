"""Leaks: each gauge back to its pre-fault baseline within a bound."""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from dataclasses import dataclass, field
from typing import Iterable, Sequence

from chaos.judge.clock import Since, start
from chaos.judge.declare import Window, verdict
from chaos.judge.model import Finding, failed, passed, unknown
from chaos.observe.history import History
from chaos.observe.pipeline import Metric
from chaos.observe.sampler import twin

__all__ = ["COUNTED", "PAGES_APART_S", "no_leak", "sources_agree"]


def _closes(h: History, within_s: float, since: Since, **_: object) -> float | None:
    begun = start(h, Since(since)) if h.first_fault_t() is not None else None
    return None if begun is None else begun + within_s


def _sources(gauges: Iterable[Metric | tuple[str, str]], **_: object) -> list[str]:
    return [source for source, _ in gauges]


@verdict(
    lambda within_s, since, **_: f"no_leak(within={within_s:g}s of {Since(since).value})",
    window=Window(_closes, _sources),
)
def no_leak(
    h: History, *, gauges: Sequence[Metric | tuple[str, str]], within_s: float, since: Since = Since.HEAL
) -> Finding:
    """Each gauge returns to its pre-fault baseline (its lowest value before the first
    fault) within ``within_s`` of the last heal (``Since.HEAL``), of the moment the system
    went quiet (``Since.QUIET``), for scenarios whose load goes on after the heal, or of the
    first fault (``Since.FAULT``), for what must be let go while the fault still lasts.

    A gauge is back only once it has risen above its baseline since the first fault: a
    reading at the baseline before anything was taken proves nothing was let go (a room
    that enters prefill's inflight queue 0.1 s after decode froze reads 0 first, then 1 for
    good). A gauge that never rose held nothing and is not at stake."""
    since = Since(since)
    inject, heal = h.first_fault_t(), h.last_heal_t()
    if inject is None or heal is None:
        return unknown("no healed fault in the history")
    begun = start(h, since)
    if begun is None:
        return unknown(f"no {since.value} in the history")
    closes = begun + within_s
    problems, blind, notes = [], [], []
    levels: dict[str, dict[str, float | None]] = {}
    for source, metric in (Metric(*g) for g in gauges):
        series = h.series(source, metric)
        before = [v for t, v in series if t < inject]
        if not before:  # no baseline: the gauge's level before the fault is unknown, not 0
            blind.append(f"{source}:{metric} has no sample before the fault")
            continue
        baseline = min(before)  # the quietest moment before the fault
        window = [(t, v) for t, v in series if begun <= t <= closes]
        if not window:
            blind.append(f"{source}:{metric} has no samples in the window")
            continue
        rose = next((t for t, v in series if inject <= t <= closes and v > baseline), None)
        back = None if rose is None else next((t for t, v in window if t > rose and v <= baseline), None)
        levels[f"{source}:{metric}"] = {
            "baseline": baseline,
            "max": max(v for _, v in window),
            "rose_s": None if rose is None else round(rose - begun, 3),
            "back_s": None if back is None else round(back - begun, 3),
        }
        if rose is None:
            notes.append(f"{source}:{metric} never rose above {baseline:g}")
        elif back is None:
            problems.append(
                f"{source}:{metric} stayed above its baseline {baseline:g} (max {max(v for _, v in window):g}, "
                f"last {window[-1][1]:g} at +{window[-1][0] - begun:.2f}s)"
            )
        else:
            notes.append(f"{source}:{metric} back to {baseline:g} at +{back - begun:.2f}s")
    held = sorted(g for g, level in levels.items() if level["rose_s"] is not None and level["back_s"] is None)
    if problems:
        return failed("; ".join(problems), at=[begun], gauges=levels, held=held, bound_s=within_s)
    if blind:
        return unknown("; ".join(blind), at=[begun], gauges=levels, bound_s=within_s)
    rose_any = sum(level["rose_s"] is not None for level in levels.values())
    return passed("; ".join(notes) or "no gauge to judge", stake=rose_any, at=[begun], gauges=levels, bound_s=within_s)


# The counts an engine reports on both pages under one meaning, and the verdicts judge:
# requests in each stage of the pipeline, and the KV tokens they hold. Not prefill's
# num_running_reqs: SGLang 0.5.23's /metrics counts prefill's forward batch there, its
# /v1/loads the running batch, which "is never populated in PD prefill" (its own comment,
# scheduler_components/metrics_reporter.py): two figures under one name (docs/known-issues.md)
COUNTED: dict[str, tuple[str, ...]] = {
    "prefill": ("num_used_tokens", "num_prefill_bootstrap_queue_reqs", "num_prefill_inflight_queue_reqs"),
    "decode": (
        "num_running_reqs",
        "num_used_tokens",
        "num_decode_prealloc_queue_reqs",
        "num_decode_transfer_queue_reqs",
    ),
}
# the two pages are fetched one after the other, and a count may move in between: a reading
# of one page is matched by the other's within two samples' worth of time on either side
PAGES_APART_S = 0.5


def _passed_through(live: Sequence[tuple[float, float]], i: int, value: float) -> bool:
    """Whether the live count may have read ``value`` while its sample's ``/metrics`` was
    fetched: that fetch falls between the previous sample's ``/v1/loads`` (``live[i - 1]``)
    and its own (``live[i]``), and a count moving from one to the other passes what lies
    between (three requests of 322 tokens arriving: 0, then 322 on /metrics, then 966)."""
    if not 0 < i < len(live):
        return False
    before, after = live[i - 1][1], live[i][1]
    return min(before, after) <= value <= max(before, after)


@dataclass
class _Figure:
    """One count's readings on both pages, judged reading by reading."""

    stake: int = 0  # readings where either page said more than 0
    # per reading: None where the pages agree, else (t, /metrics value, live values near, kind)
    apart: list[tuple[float, float, list[float], str] | None] = field(default_factory=list)

    def lasting(self) -> list[tuple[float, float, list[float], str]]:
        """The disagreements that outlast one sample (a neighbouring reading disagrees too)."""
        a = self.apart
        return [
            r
            for i, r in enumerate(a)
            if r is not None and ((i > 0 and a[i - 1] is not None) or (i + 1 < len(a) and a[i + 1] is not None))
        ]


def _figure(live: Sequence[tuple[float, float]], said: Sequence[tuple[float, float]], within_s: float) -> _Figure:
    figure = _Figure()
    times = [u for u, _ in live]  # samples come in time order
    for t, value in said:
        near = [v for _, v in live[bisect_left(times, t - within_s) : bisect_right(times, t + within_s)]]
        figure.stake += value > 0 or any(v > 0 for v in near)
        i = bisect_left(times, t)
        if value in near or _passed_through(live, i, value):
            figure.apart.append(None)
        else:  # stale: the live count read it before; unread: it never did
            figure.apart.append((t, value, near, "stale" if value in [v for _, v in live[:i]] else "unread"))
    return figure


@verdict(lambda within_s=PAGES_APART_S, **_: f"sources_agree(within={within_s:g}s)")
def sources_agree(
    h: History, *, engines: Sequence[str] = ("prefill", "decode"), within_s: float = PAGES_APART_S
) -> Finding:
    """Each engine's two pages agree on every count both report (``COUNTED``): each value
    its ``/metrics`` read, its ``/v1/loads`` (the live count the other verdicts judge) read
    too, within ``within_s`` of it, or lies between the two ``/v1/loads`` readings its fetch
    fell between (a count on the move). A disagreement that outlasts one sample fails; a
    lone one (a *blip*: a request that came and went between two reads of the live count,
    which the rig cannot tell from a lie that short) is counted in the evidence only. A
    disagreement is *stale* where ``/v1/loads`` had read that value before (a page
    refreshed less often than the live count: SGLang's ``/metrics``, a known issue),
    *unread* where it never had: one page reports a count the other never showed, so one
    of them lies, and a monitor reading it sees a stuck engine as idle or an idle one as
    busy. At stake: the readings where either page said more than 0 (zeros on both pages of
    an idle engine say nothing). Unknown without a reading of both."""
    readings = stake = 0
    disagreed: dict[str, int] = {}
    blips: dict[str, int] = {}
    kinds: set[str] = set()
    examples: list[str] = []
    first: list[float] = []
    for source in engines:
        for name in COUNTED.get(source, ()):
            live, said = h.series(source, name), h.series(source, twin(name))
            if not said or not live:
                continue
            figure, key = _figure(live, said, within_s), f"{source}:{name}"
            readings, stake = readings + len(said), stake + figure.stake
            lasting = figure.lasting()
            if lone := sum(r is not None for r in figure.apart) - len(lasting):
                blips[key] = lone
            if not lasting:
                continue
            kinds |= {kind for *_, kind in lasting}
            disagreed[key] = len(lasting)
            t, value, near, kind = lasting[0]
            first.append(t)
            examples.append(f"{key} /metrics {value:g} at {t:.2f}s, /v1/loads {sorted(set(near)) or 'none'} ({kind})")

    if not readings:
        return unknown("no sample holds both pages of a count (/metrics and /v1/loads)")
    if disagreed:
        return failed(
            f"{sum(disagreed.values())} of {readings} /metrics readings disagreed with /v1/loads for more than "
            "a sample: " + "; ".join(examples),
            at=first,
            disagreed=disagreed,
            figures=sorted(disagreed),
            kinds=sorted(kinds),
            blips=blips,
            readings=readings,
            bound_s=within_s,
        )
    return passed(
        f"{readings} /metrics readings agreed with /v1/loads, {stake} of them above 0"
        + (f", {sum(blips.values())} lone blips" if blips else ""),
        stake=stake,
        readings=readings,
        blips=blips,
        bound_s=within_s,
    )
