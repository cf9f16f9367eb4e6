"""Judging a history: evaluate checks, record them in it, and raise on what did not pass.

A check that raises knows nothing: its verdict is unknown (a premise's, unmet), never a
pass. Every judged check is written into the history as a ``VerdictRecord``, the record
the reports, the known-issue marks and the kill matrix read.
"""

from __future__ import annotations

from typing import Iterable

from chaos.errors import PremiseNotMet
from chaos.judge.declare import Check
from chaos.judge.known import KnownIssue, raise_unless_passed
from chaos.judge.model import Role, Status, Verdict
from chaos.observe.history import History
from chaos.observe.records import VerdictRecord

__all__ = ["evaluate", "expect", "record", "require"]


def evaluate(history: History, checks: Iterable[Check]) -> list[Verdict]:
    out = []
    for check in checks:
        try:
            out.append(check(history))
        except Exception as exc:  # a verdict that raises knows nothing: unknown, never pass
            status = Status.UNMET if check.role is Role.PREMISE else Status.UNKNOWN
            said = f"raised {type(exc).__name__}: {exc}"
            out.append(Verdict(check.kind, check.name, status, said, check.params, role=check.role, by=check.by))
    return out


def record(history: History, verdicts: list[Verdict]) -> list[Verdict]:
    """Write verdicts into the history (the reports and the results read them from there)."""
    for v in verdicts:
        data = v.as_json()
        history.append(
            VerdictRecord(
                history.now(),
                v.name,
                v.status.value,
                v.message,
                check=v.kind,
                role=v.role.value,
                by=v.by,
                params=data["params"],
                evidence=data["evidence"],
            )
        )
    return verdicts


def expect(history: History, *checks: Check, known: Iterable[KnownIssue] = ()) -> list[Verdict]:
    """Judge the history now; every verdict is recorded in it; raise unless all passed."""
    verdicts = record(history, evaluate(history, checks))
    raise_unless_passed(verdicts, known)
    return verdicts


def require(history: History, *premises: Check) -> None:
    """Check a scenario's premises before it is judged: one that did not hold raises
    ``PremiseNotMet`` (the run tested nothing; neither pass nor fail), recorded in the history."""
    not_premises = [c.name for c in premises if c.role is not Role.PREMISE]
    if not_premises:
        raise TypeError(f"require takes premises, not verdicts: {', '.join(not_premises)} (scenario.judge)")
    for judged in record(history, evaluate(history, premises)):
        if judged.status is not Status.PASS:
            raise PremiseNotMet(f"premise not met: {judged}")
