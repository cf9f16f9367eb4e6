"""Known upstream issues: a verdict that a named behaviour of a named component fails.

A known issue names the verdict by kind (and, where a test judges several of that kind,
by parameters), the component and version it was seen in, and the behaviour. Judged, it is
one of three things: the verdict failed and nothing else did (``KnownIssueSeen``: pytest
reports the test as xfailed, with the evidence record); it passed or was not judged (the
issue is gone or the scenario no longer shows it: a failure, strict as pytest's xfail);
or something else failed too (a failure).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable

from chaos.judge.model import Role, Status, Verdict

__all__ = ["KnownIssue", "KnownIssueSeen", "VerdictFailed", "raise_unless_passed"]


@dataclass(frozen=True)
class KnownIssue:
    verdict: str  # the verdict's kind
    component: str  # "smg", "SGLang"
    version: str  # the version it was seen in: "1.13.0"
    behaviour: str  # what it does, and the evidence that showed it
    params: dict[str, Any] = field(default_factory=dict)  # params the verdict must have (JSON form)

    @property
    def reason(self) -> str:
        return f"KNOWN ISSUE {self.component} {self.version}: {self.behaviour}"

    def names(self, v: Verdict) -> bool:
        judged = v.as_json()["params"]
        return (
            v.role is Role.VERDICT
            and v.kind == self.verdict
            and all(judged.get(k) == p for k, p in self.params.items())
        )

    def as_json(self, shown: Iterable[Verdict] = ()) -> dict[str, Any]:
        return {
            "verdict": self.verdict,
            "component": self.component,
            "version": self.version,
            "behaviour": self.behaviour,
            "params": self.params,
            "evidence": [v.as_json() for v in shown],
        }


class VerdictFailed(AssertionError):
    """A test failed on its verdicts (not a rig error): ``failed`` when one of them failed,
    not only unknown (``--stop-at-verdict`` stops there, and only there)."""

    def __init__(self, message: str, *, failed: bool = True) -> None:
        super().__init__(message)
        self.failed = failed


class KnownIssueSeen(Exception):
    """Every verdict passed but those known issues fail, and each of those failed: the test
    shows the known behaviour again. ``seen`` holds each issue with the verdicts that show it."""

    def __init__(self, seen: list[tuple[KnownIssue, list[Verdict]]]) -> None:
        super().__init__("; ".join(f"{issue.reason} [{'; '.join(v.message for v in got)}]" for issue, got in seen))
        self.seen = seen


def raise_unless_passed(verdicts: list[Verdict], known: Iterable[KnownIssue] = ()) -> None:
    """``VerdictFailed`` naming every verdict that failed or is unknown, unless only known
    issues failed (``KnownIssueSeen``); a known issue not shown fails the test (strict)."""
    judged = [v for v in verdicts if v.role is Role.VERDICT]
    seen = [(issue, [v for v in judged if issue.names(v)]) for issue in known]
    gone = [
        f"[XPASS(strict)] {issue.verdict}: known issue not shown "
        f"({'; '.join(v.message for v in got) or 'not judged'}): {issue.reason}"
        for issue, got in seen
        if not any(v.status is Status.FAIL for v in got)
    ]
    confirmed = [v for _, got in seen for v in got if v.status is Status.FAIL]
    others = [v for v in judged if v.status is not Status.PASS and v not in confirmed]
    if others or gone:
        failed = any(v.status is Status.FAIL for v in others)
        raise VerdictFailed(
            "\n".join([*(str(v) for v in others), *gone, *(f"{v} (known issue)" for v in confirmed)]), failed=failed
        )
    if confirmed:
        raise KnownIssueSeen([(issue, [v for v in got if v.status is Status.FAIL]) for issue, got in seen])
