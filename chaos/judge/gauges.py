"""Leaks: each gauge back to its pre-fault baseline within a bound."""

from __future__ import annotations

from typing import Iterable, Sequence

from chaos.history import History
from chaos.judge.clock import Since, start
from chaos.judge.declare import Window, verdict
from chaos.judge.model import Finding, failed, passed, unknown
from chaos.pipeline import Metric

__all__ = ["no_leak"]


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
    first fault (``Since.FAULT``), for what must be let go while the fault still lasts."""
    since = Since(since)
    inject, heal = h.first_fault_t(), h.last_heal_t()
    if inject is None or heal is None:
        return unknown("no healed fault in the history")
    begun = start(h, since)
    if begun is None:
        return unknown(f"no {since.value} in the history")
    problems, blind, notes = [], [], []
    levels: dict[str, dict[str, float | None]] = {}
    for source, metric in (Metric(*g) for g in gauges):
        series = h.series(source, metric)
        before = [v for t, v in series if t < inject]
        if not before:  # no baseline: the gauge's level before the fault is unknown, not 0
            blind.append(f"{source}:{metric} has no sample before the fault")
            continue
        baseline = min(before)  # the quietest moment before the fault
        window = [(t, v) for t, v in series if begun <= t <= begun + within_s]
        if not window:
            blind.append(f"{source}:{metric} has no samples in the window")
            continue
        back = next((t for t, v in window if v <= baseline), None)
        levels[f"{source}:{metric}"] = {
            "baseline": baseline,
            "max": max(v for _, v in window),
            "back_s": None if back is None else round(back - begun, 3),
        }
        if back is None:
            problems.append(
                f"{source}:{metric} stayed above its baseline {baseline:g} (max {max(v for _, v in window):g}, "
                f"last {window[-1][1]:g} at +{window[-1][0] - begun:.2f}s)"
            )
        else:
            notes.append(f"{source}:{metric} back to {baseline:g} at +{back - begun:.2f}s")
    held = sorted(g for g, level in levels.items() if level["back_s"] is None)
    if problems:
        return failed("; ".join(problems), at=[begun], gauges=levels, held=held, bound_s=within_s)
    if blind:
        return unknown("; ".join(blind), at=[begun], gauges=levels, bound_s=within_s)
    return passed(
        "; ".join(notes) or "no gauge to judge", stake=len(levels), at=[begun], gauges=levels, bound_s=within_s
    )
