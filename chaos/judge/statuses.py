"""What HTTP status requests were answered with, and how soon a refusal came."""

from __future__ import annotations

from typing import Collection

from chaos.history import History, Outcome, Phase
from chaos.judge.declare import verdict
from chaos.judge.model import Finding, passed, unknown
from chaos.judge.ops import all_within, completed, label, naming, none_completed

__all__ = ["refused_within", "served_or_refused", "statuses_in"]


def _shown(allowed: Collection[int]) -> str:
    return f"{min(allowed)}-{max(allowed)}" if isinstance(allowed, range) else ",".join(str(a) for a in sorted(allowed))


@verdict(lambda allowed, phase, why, **_: f"statuses_in({_shown(allowed)}, {Phase(phase).value}: {why})")
def statuses_in(h: History, allowed: Collection[int], *, phase: Phase, why: str) -> Finding:
    """Every request of ``phase`` was answered with an HTTP status in ``allowed``: e.g. a
    request the client got wrong is refused with a 4xx, never a 5xx (which charges the
    worker). A request with no status (it never got an answer) does not hold."""
    ops = completed(h, phase)
    if not ops:
        return unknown(none_completed(phase))
    bad = [o for o in ops if o.complete.status not in allowed]
    if bad:
        return naming(
            bad,
            len(ops),
            f"outside {_shown(allowed)}",
            lambda o: f"{label(o)} got {o.complete.status} ({o.outcome.value}) {o.complete.error[:100]}",
            shown=3,
            statuses=sorted({str(o.complete.status) for o in bad}),
        )
    answered = sorted({str(o.complete.status) for o in ops})
    return passed(f"all {len(ops)} answered {', '.join(answered)}", statuses=answered, of=len(ops))


@verdict(lambda status, within_s, phase, **_: f"refused_within({status}, {within_s:g}s, {Phase(phase).value})")
def refused_within(h: History, status: int, within_s: float, *, phase: Phase) -> Finding:
    """Every request of ``phase`` answered ``status`` got that answer within ``within_s`` of
    its send: a refusal is shed at the door, not after the request waited for a timeout."""
    refused = [(o.complete.t - o.invoke.t, o) for o in completed(h, phase) if o.complete.status == status]
    if not refused:
        return unknown(f"no request of phase {Phase(phase).value!r} was answered {status}")
    return all_within(
        refused,
        within_s,
        over="refusals came late",
        each="after {:.2f}s",
        shown="{n} refusals, the slowest in {worst:.2f}s",
    )


@verdict(lambda status, phase, **_: f"served_or_refused({status}, {Phase(phase).value})")
def served_or_refused(h: History, status: int, *, phase: Phase) -> Finding:
    """Every request of ``phase`` either succeeded or was refused with ``status``: load
    shedding turns the excess away and serves the rest whole, it fails nothing else."""
    ops = completed(h, phase)
    if not ops:
        return unknown(none_completed(phase))
    bad = [o for o in ops if o.outcome is not Outcome.OK and o.complete.status != status]
    if bad:
        return naming(
            bad,
            len(ops),
            f"neither served nor refused with {status}",
            lambda o: f"{label(o)} got {o.complete.status} and ended {o.outcome.value} {o.complete.error[:100]}",
            shown=3,
        )
    refused = sum(1 for o in ops if o.complete.status == status)
    return passed(
        f"{len(ops) - refused} served, {refused} refused with {status}", served=len(ops) - refused, refused=refused
    )
