"""When a bound's clock starts, read from the history."""

from __future__ import annotations

import enum
import itertools

from chaos.observe.history import History
from chaos.observe.records import Phase

__all__ = ["SAMPLE_TOLERANCE_S", "Since", "increments", "start"]

SAMPLE_TOLERANCE_S = 0.25  # a gauge change is seen up to two 10 Hz samples late


class Since(enum.StrEnum):
    """The moment a bound's clock starts: the first fault's injection, the last fault's
    injection (the one that struck while earlier ones set the stage: decode killed while
    its KV link crawls), the first request sent after the first fault (a per-request
    watchdog's clock, such as SGLang's bootstrap or waiting timeout, starts when its request
    reaches the engine, never before the client sent it), the last heal, or the moment the
    system went quiet (healed and no request of the scenario open: the rig's recovery
    probes, ``Phase.PROBE``, come after that moment and do not move it)."""

    FAULT = "fault"
    LAST_FAULT = "last fault"
    REQUEST = "first request into the fault"
    HEAL = "heal"
    QUIET = "quiet"


def start(h: History, since: Since) -> float | None:
    """When ``since`` happened in the history (None: it did not)."""
    if since is Since.FAULT:
        return h.first_fault_t()
    if since is Since.LAST_FAULT:
        return h.last_fault_t()
    if since is Since.REQUEST:
        fault = h.first_fault_t()
        return None if fault is None else min((o.invoke.t for o in h.ops() if o.invoke.t >= fault), default=None)
    heal = h.last_heal_t()
    if since is Since.HEAL or heal is None:
        return heal
    return max([heal, *(o.complete.t for o in h.ops() if o.complete is not None and o.invoke.phase is not Phase.PROBE)])


def increments(series: list[tuple[float, float]]) -> list[float]:
    """The moments a counter's series rose."""
    return [t for (_, a), (t, b) in itertools.pairwise(series) if b > a]
