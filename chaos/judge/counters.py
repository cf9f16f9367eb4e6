"""Failure counters: a watchdog's rose inside its window, or a counter never rose at all."""

from __future__ import annotations

from typing import Any

from chaos.judge.clock import SAMPLE_TOLERANCE_S, Since, increments, start
from chaos.judge.declare import Window, verdict
from chaos.judge.model import Finding, failed, passed, unknown
from chaos.observe.history import History
from chaos.observe.pipeline import Metric

__all__ = ["counter_never_rises", "watchdog_fired"]


def _watchdog_label(name: str, counter: Metric, timeout_s: float, slack_s: float, since: Since, **_: object) -> str:
    source, counter_name = counter
    window = f"[{timeout_s:g}s, {timeout_s + slack_s:g}s]"
    return f"watchdog_fired({name}: {source}:{counter_name} in {window} after the {Since(since).value})"


def _watchdog_closes(h: History, timeout_s: float, slack_s: float, since: Since, **_: object) -> float | None:
    begun = start(h, Since(since))
    return None if begun is None else begun + timeout_s + slack_s


@verdict(_watchdog_label, window=Window(_watchdog_closes, lambda counter, **_: (counter[0],)))
def watchdog_fired(
    h: History, name: str, counter: Metric, *, timeout_s: float, slack_s: float, since: Since = Since.FAULT
) -> Finding:
    """The failure counter a watchdog bumps rose within [T, T + slack] after the first fault
    (``Since.FAULT``), after the first request sent into it (``Since.REQUEST``: for a
    watchdog whose clock each request starts), or after the last heal (``Since.HEAL``: the
    watchdog's clock starts when a healed service resumes work), T being ``timeout_s``: it
    fired, neither early nor late. A heal takes effect at some moment while it runs, so the
    window opens T after the heal began and closes T + slack after it was done; times are
    given from its start. A rise before the window opens fails, whatever comes after."""
    since, (source, counter_name) = Since(since), counter
    after = f"the {since.value}"
    done = start(h, since)
    series = h.counter_series(source, counter_name)
    if done is None or not series:
        return unknown(f"no {since.value} or no samples of the counter")
    began = h.last_heal_began_t() if since is Since.HEAL else None
    ref = done if began is None else began
    lo, hi = ref + timeout_s - SAMPLE_TOLERANCE_S, done + timeout_s + slack_s
    took = f" (it took {done - ref:.2f}s)" if done - ref >= 0.01 else ""
    ups = [t for t in increments(series) if t >= ref]
    hits = [t for t in ups if lo <= t <= hi]
    seen = ", ".join(f"{t - ref:+.2f}s" for t in ups[:6]) or "never"
    figures: dict[str, Any] = {
        "rises_s": [round(t - ref, 3) for t in ups[:8]],
        "window_s": [round(lo - ref, 3), round(hi - ref, 3)],
    }
    early = [t for t in ups if t < lo]
    if early:  # whatever came after: a watchdog that fires before its timeout is broken
        return failed(
            f"{counter_name} on {source} rose {early[0] - ref:.2f}s after {after}{took}, before the window opens: "
            f"fired early; rises seen: {seen}",
            at=[ref, *early],
            fired_s=round(early[0] - ref, 3),
            **figures,
        )
    if hits:
        return passed(
            f"{counter_name} rose {hits[0] - ref:.2f}s after {after}{took}",
            stake=1,
            at=[ref, hits[0]],
            fired_s=round(hits[0] - ref, 3),
            **figures,
        )
    if series[-1][0] < hi:
        return unknown(
            f"samples end {series[-1][0] - ref:.2f}s after {after}{took}, before the window closes; rises seen: {seen}",
            at=[ref, series[-1][0]],
            **figures,
        )
    return failed(
        f"{counter_name} on {source} did not rise inside the window; rises after {after}{took}: {seen}",
        at=[ref, *ups],
        **figures,
    )


def _never_label(counter: Metric, why: str, **_: object) -> str:
    return f"counter_never_rises({counter[0]}:{counter[1]}{': ' + why if why else ''})"


@verdict(_never_label)
def counter_never_rises(h: History, counter: Metric, *, why: str = "") -> Finding:
    """A failure counter stays flat for the whole test: slow was not taken for stuck. At
    stake: the requests sent while it was sampled (what could have made it rise)."""
    source, counter_name = counter
    series = h.counter_series(source, counter_name)
    if len(series) < 2:
        return unknown(f"too few samples of {source}:{counter_name}")
    ups = increments(series)
    if ups:
        fault = h.first_fault_t()
        ref = fault or 0.0
        return failed(
            f"{counter_name} rose {len(ups)} time(s), first {ups[0] - ref:+.2f}s after the fault",
            at=ups,
            rises=len(ups),
            first_s=round(ups[0] - ref, 3),
            after_fault=fault is not None and ups[0] >= fault,
        )
    sent = [o for o in h.ops() if series[0][0] <= o.invoke.t <= series[-1][0]]
    return passed(
        f"{counter_name} stayed at {series[-1][1]:g} over {len(sent)} requests",
        stake=len(sent),
        level=series[-1][1],
        requests=len(sent),
    )
