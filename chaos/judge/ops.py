"""The requests a verdict judges: scoped to a phase, completed or not, labelled for people."""

from __future__ import annotations

from typing import Any, Callable, Sequence

from chaos.judge.model import Finding, failed, passed
from chaos.observe.history import History
from chaos.observe.records import Done, Op, Phase

__all__ = ["all_within", "completed", "label", "naming", "none_completed", "phase_tag", "scope"]


def label(op: Op) -> str:
    i = op.invoke
    who = f" {i.agent} round {i.round}" if i.agent else ""
    return f"{i.op}{who} ({i.path}, t={i.t:.2f}s)"


def scope(history: History, phase: Phase | None) -> list[Op]:
    return [op for op in history.ops() if phase is None or op.invoke.phase == phase]


def completed(history: History, phase: Phase | None) -> list[Done]:
    """The requests of ``phase`` that completed (however they ended)."""
    return [Done(o.invoke, o.complete, o.chunks) for o in scope(history, phase) if o.complete is not None]


def phase_tag(phase: Phase | None) -> str:
    """A verdict label's scope: ``[fault]`` for a phase, nothing for the whole history."""
    return f"[{Phase(phase).value}]" if phase else ""


def none_completed(phase: Phase | None) -> str:
    return "no request completed" if phase is None else f"no request of phase {Phase(phase).value!r} completed"


def all_within(measured: Sequence[tuple[float, Op]], bound_s: float, *, over: str, each: str, shown: str) -> Finding:
    """Pass when every op's measure (seconds) is within ``bound_s``; else fail naming the
    first few over it. ``each`` formats one measure, ``shown`` the count and the worst."""
    beyond = [(d, o) for d, o in measured if d > bound_s]
    worst = max(d for d, _ in measured)
    if beyond:
        ev = "; ".join(f"{label(o)}: {each.format(d)}" for d, o in beyond[:4])
        return failed(
            f"{len(beyond)} of {len(measured)} {over}: {ev}",
            ops=[o.invoke.op for _, o in beyond],
            over=len(beyond),
            of=len(measured),
            worst_s=worst,
            bound_s=bound_s,
        )
    return passed(
        shown.format(n=len(measured), worst=worst),
        stake=len(measured),
        of=len(measured),
        worst_s=worst,
        bound_s=bound_s,
    )


def naming(
    bad: Sequence[Done],
    of: int,
    what: str,
    say: Callable[[Done], str],
    *,
    shown: int = 5,
    finding: Callable[..., Finding] = failed,
    **values: Any,
) -> Finding:
    """ "``bad`` of ``of`` requests ``what``", the first ``shown`` of them told by ``say``;
    their op ids and counts in the evidence (a failure, or with ``finding`` an unmet premise)."""
    told = "; ".join(say(o) for o in bad[:shown])
    return finding(
        f"{len(bad)} of {of} {what}: {told}", ops=[o.invoke.op for o in bad], count=len(bad), of=of, **values
    )
