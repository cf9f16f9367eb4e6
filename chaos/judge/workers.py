"""One worker of several struck: what the others and the router must do about it.

In a stack with two engines of a kind (``chaos.system.topology``), a fault on one of them
(the ``struck`` one: killed, frozen, cut off) must stay its own. Its twins serve on, the
router stops sending to it within its health checks' bound and takes it back once it is
healthy again. Which worker served a request is read from the engines' own log lines about
it (``LogEvent``, by the request's id): a request an engine logged went through it. The
router logs no worker per request (smg 1.13.0), so a request no engine of the struck kind
logged is placed nowhere, and counted as such, never as a twin's.
"""

from __future__ import annotations

import math
from typing import Any

from chaos.judge.declare import verdict
from chaos.judge.logs import placed
from chaos.judge.model import Finding, failed, nothing_at_stake, passed, unknown
from chaos.judge.ops import completed, label
from chaos.observe.history import History
from chaos.observe.records import Done, FaultEvent, Outcome, Stage

__all__ = ["healthy_workers_unaffected", "routed_around", "taken_back"]


def _strike(h: History, struck: str) -> tuple[float, float] | None:
    """When the first fault on ``struck`` was injected and when it was healed (inf: never)."""
    events = [f for f in h.of(FaultEvent) if struck in f.implicates]
    starts = [f for f in events if f.stage is Stage.INJECT]
    if not starts:
        return None
    first = min(starts, key=lambda f: f.t)
    healed = [f.t for f in events if f.fault == first.fault and f.stage is Stage.HEALED]
    return first.t, (min(healed) if healed else math.inf)


def _no_strike(struck: str) -> Finding:
    return unknown(f"no fault on {struck} in the history")


@verdict(lambda struck, **_: f"healthy_workers_unaffected({struck})")
def healthy_workers_unaffected(h: History, *, struck: str) -> Finding:
    """Every request in flight when ``struck`` was struck, or sent while it was, that its
    twins served and it never saw (no line of ``struck``'s log names it), succeeded: a
    worker's fault is its own, not its twins'. Where decode's heartbeat gives up a dead
    prefill, it gives up that prefill's rooms only; where the router loses a decode, it fails
    only what it had sent there. Nothing at stake without such a request in flight at the
    strike: what the twins did meanwhile then says nothing of the fault."""
    span = _strike(h, struck)
    if span is None:
        return _no_strike(struck)
    start, healed = span
    where = placed(h, struck)
    twins = [
        o
        for o in completed(h, None)
        if where.get(o.invoke.op)
        and struck not in where[o.invoke.op]
        and o.invoke.t <= healed
        and o.complete.t >= start
    ]
    in_flight = [o for o in twins if o.invoke.t <= start]
    unplaced = sum(1 for o in completed(h, None) if start <= o.complete.t and o.invoke.op not in where)
    figures: dict[str, Any] = {"in_flight_at_strike": len(in_flight), "of": len(twins), "unplaced": unplaced}
    if not in_flight:
        return nothing_at_stake(
            f"no request its twins served was in flight when {struck} was struck ({len(twins)} sent after)", **figures
        )
    bad = [o for o in twins if o.outcome is not Outcome.OK]
    if bad:
        told = "; ".join(f"{label(o)} on {', '.join(sorted(where[o.invoke.op]))}: {o.outcome.value}" for o in bad[:5])
        return failed(
            f"{len(bad)} of {len(twins)} requests its twins served failed while {struck} was struck: {told}",
            ops=[o.invoke.op for o in bad],
            at=[start],
            count=len(bad),
            **figures,
        )
    return passed(
        f"{len(twins)} requests its twins served while {struck} was struck all succeeded "
        f"({len(in_flight)} in flight at the strike; {unplaced} placed on no worker of its kind)",
        stake=len(in_flight),
        at=[start],
        **figures,
    )


@verdict(lambda struck, within_s, **_: f"routed_around({struck}, within={within_s:g}s)")
def routed_around(h: History, *, struck: str, within_s: float) -> Finding:
    """Every request sent from ``within_s`` after ``struck`` was struck until it was healed
    succeeded, and none went to it (no line of its log names one): by then the router's
    health checks (or its breaker) have taken it out of rotation. Nothing at stake if no
    request was sent in that window: the fault was not held long enough to tell."""
    span = _strike(h, struck)
    if span is None:
        return _no_strike(struck)
    start, healed = span
    where = placed(h, struck)
    late = [o for o in completed(h, None) if start + within_s <= o.invoke.t <= healed]
    if not late:
        return nothing_at_stake(f"no request was sent between {within_s:g}s after the strike and the heal")

    def wrong(o: Done) -> str:
        if struck in where.get(o.invoke.op, set()):
            return f"sent to {struck}"
        return "" if o.outcome is Outcome.OK else o.outcome.value

    bad = [o for o in late if wrong(o)]
    if bad:
        told = "; ".join(f"{label(o)}: {wrong(o)} (+{o.invoke.t - start:.1f}s)" for o in bad[:5])
        return failed(
            f"{len(bad)} of {len(late)} requests sent {within_s:g}s and more after {struck} was struck "
            f"were sent to it or failed: {told}",
            ops=[o.invoke.op for o in bad],
            at=[start],
            count=len(bad),
            of=len(late),
        )
    return passed(
        f"{len(late)} requests sent {within_s:g}s and more after {struck} was struck all went to its twins and succeeded",
        stake=len(late),
        at=[start],
        of=len(late),
    )


@verdict(lambda struck, within_s, **_: f"taken_back({struck}, within={within_s:g}s)")
def taken_back(h: History, *, struck: str, within_s: float) -> Finding:
    """After its heal, ``struck`` serves again: a request it logged, sent after the heal,
    succeeded within ``within_s`` of it. A worker the router never takes back leaves its
    twins to carry every request for good. Unknown if no request was sent after the heal
    through the bound: nothing could have gone to it."""
    span = _strike(h, struck)
    if span is None:
        return _no_strike(struck)
    _, healed = span
    if healed == math.inf:
        return unknown(f"{struck} was never healed")
    where = placed(h, struck)
    after = [o for o in completed(h, None) if o.invoke.t >= healed]
    served = sorted(
        (o for o in after if o.outcome is Outcome.OK and struck in where.get(o.invoke.op, set())),
        key=lambda o: o.complete.t,
    )
    if served and served[0].complete.t - healed <= within_s:
        took = served[0].complete.t - healed
        return passed(
            f"{struck} served {len(served)} of {len(after)} requests after its heal, the first {took:.2f}s after it",
            stake=len(after),
            ops=[served[0].invoke.op],
            at=[healed],
            taken_back_s=round(took, 3),
            served=len(served),
            of=len(after),
        )
    if not any(o.invoke.t >= healed + within_s for o in after):
        return unknown(f"no request was sent {within_s:g}s or more after {struck}'s heal: it could not be taken back")
    first = f"; the first {served[0].complete.t - healed:.1f}s after the heal" if served else ""
    return failed(
        f"{struck} served none of {len(after)} requests within {within_s:g}s of its heal ({len(served)} in all{first})",
        at=[healed],
        served=len(served),
        of=len(after),
    )
