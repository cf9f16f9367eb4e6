"""Known upstream issues: a verdict that a named behaviour of a named component fails.

A known issue names the verdict by kind (and, where a test judges several of that kind,
by parameters), the component and version it was seen in, the behaviour, and the shape of
the evidence that behaviour leaves (``evidence``: the outcomes of the failed requests, the
backstop that released them, the gauges that held, the worker charged). A failure of the
named verdict whose evidence falls outside that shape is another failure, not the known
one: a new regression of the same verdict must not pass as the known upstream behaviour.

Judged, a known issue is one of three things: the verdict failed with the known evidence and
nothing else failed (``KnownIssueSeen``: pytest reports the test as xfailed, with the
evidence record); it passed or was not judged (the issue is gone or the scenario no longer
shows it: a failure, strict as pytest's xfail, unless the issue is a race that shows in
some runs only, ``strict=False``); or something else failed too, the same
verdict with other evidence included (a failure, reported beside the known issue).

The test's own verdicts must each have had something at stake: one not at stake is not a
pass (``Status.NOT_AT_STAKE``). The kit's (``settle``, explore's universal invariants) may
be not at stake, and are shown as such.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Protocol

from chaos.judge.model import Role, Status, Verdict

__all__ = ["KnownIssue", "KnownIssueSeen", "VerdictFailed", "evidence_fits", "holds", "raise_unless_passed"]


def evidence_fits(shape: dict[str, Any], values: dict[str, Any]) -> bool:
    """Whether a verdict's evidence ``values`` (JSON form) have ``shape``: each key present;
    for a list in the shape (the known categories), a non-empty value whose every item is
    one of them (``{"outcomes": ["client_timeout"]}`` fits ``["client_timeout"]``, not
    ``["client_timeout", "truncated"]``); for ``{"between": [lo, hi]}``, a number in that
    closed range; any other value, equal."""
    for key, want in shape.items():
        if key not in values:
            return False
        got = values[key]
        if isinstance(want, dict) and set(want) == {"between"}:
            lo, hi = want["between"]
            if not isinstance(got, (int, float)) or not lo <= got <= hi:
                return False
        elif isinstance(want, (list, tuple, set, frozenset)):
            items = got if isinstance(got, list) else [got]
            if not items or any(item not in want for item in items):
                return False
        elif got != want:
            return False
    return True


@dataclass(frozen=True)
class KnownIssue:
    verdict: str  # the verdict's kind
    component: str  # "smg", "SGLang"
    version: str  # the version it was seen in: "1.13.0"
    behaviour: str  # what it does, and the evidence that showed it
    evidence: dict[str, Any]  # the shape of the evidence it leaves (``evidence_fits``), JSON form
    params: dict[str, Any] = field(default_factory=dict)  # params the verdict must have (JSON form)
    # a race upstream that shows in some runs only: not shown, the test passes all the same
    # (pytest's xfail(strict=False)); shown, only with its evidence. Strict by default.
    strict: bool = True

    def __post_init__(self) -> None:
        if not self.evidence:
            raise TypeError(
                f"known issue of {self.verdict} declares no evidence: any failure of it would pass as known"
            )

    @property
    def reason(self) -> str:
        return f"KNOWN ISSUE {self.component} {self.version}: {self.behaviour}"

    def names(self, v: Verdict) -> bool:
        """Whether ``v`` is the verdict this issue is about (its kind and parameters)."""
        judged = v.as_json()["params"]
        return (
            v.role is Role.VERDICT
            and v.kind == self.verdict
            and all(judged.get(k) == p for k, p in self.params.items())
        )

    def shows(self, v: Verdict) -> bool:
        """Whether ``v`` failed the way this issue fails it: named, failed, and its
        evidence of the known shape."""
        return (
            self.names(v)
            and v.status is Status.FAIL
            and evidence_fits(self.evidence, v.as_json()["evidence"]["values"])
        )

    def as_json(self, shown: Iterable[Verdict] = ()) -> dict[str, Any]:
        return {
            "verdict": self.verdict,
            "component": self.component,
            "version": self.version,
            "behaviour": self.behaviour,
            "params": self.params,
            "shape": self.evidence,
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


class _Judged(Protocol):
    @property
    def status(self) -> Status: ...

    @property
    def by(self) -> str: ...


def holds(v: _Judged) -> bool:
    """Whether ``v`` (a verdict judged now, or read back from a result) lets its test pass:
    it passed, or it is the kit's and not at stake."""
    return v.status is Status.PASS or (v.status is Status.NOT_AT_STAKE and v.by != "test")


def raise_unless_passed(verdicts: list[Verdict], known: Iterable[KnownIssue] = ()) -> None:
    """``VerdictFailed`` naming every verdict that failed, is unknown or (the test's own) was
    not at stake, unless only known issues failed, each with its known evidence
    (``KnownIssueSeen``); a known issue not shown fails the test (strict)."""
    judged = [v for v in verdicts if v.role is Role.VERDICT]
    seen = [(issue, [v for v in judged if issue.shows(v)]) for issue in known]
    gone = [
        f"[XPASS(strict)] {issue.verdict}: known issue not shown "
        f"({'; '.join(v.message for v in judged if issue.names(v)) or 'not judged'}): {issue.reason}"
        for issue, got in seen
        if not got and issue.strict
    ]
    confirmed = [v for _, got in seen for v in got]
    others = [v for v in judged if not holds(v) and v not in confirmed]
    if others or gone:
        failed = any(v.status is Status.FAIL for v in others)
        outside = [v for v in others if any(issue.names(v) for issue in known) and v.status is Status.FAIL]
        raise VerdictFailed(
            "\n".join(
                [
                    *(f"{v} (not the known issue's evidence)" if v in outside else str(v) for v in others),
                    *gone,
                    *(f"{v} (known issue)" for v in confirmed),
                ]
            ),
            failed=failed,
        )
    if confirmed:
        raise KnownIssueSeen([(issue, got) for issue, got in seen if got])
