"""What a judgement is: a status and the evidence it rests on, as data.

A verdict's result carries its kind (what known-issue marks and the kill matrix name), its
parameters, its status and an ``Evidence`` record: the figures it measured, the requests
and the moments it points at. The sentence a person reads is written from those same
values when the verdict is judged; no reader parses it back. A premise is judged the same
way but says whether the run did what it meant to (met or unmet), never pass or fail.

A pass must have had something at stake (Jepsen's checkers answer ``:unknown`` otherwise):
``passed`` takes ``stake``, the count of what could have failed the verdict in its scope (the
requests it judged, the gauges it read, the workers it could have found charged). A stake
of 0 is not a pass but ``NOT_AT_STAKE``: the verdict held because its scope was empty. The
test's own verdicts must each have had something at stake for the test to pass; those the
kit declares on a test's behalf (``settle``, explore's universal invariants) may be not at
stake, and the reports say so.
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass, field
from typing import Any, Iterable

__all__ = [
    "Evidence",
    "Finding",
    "Role",
    "Status",
    "Verdict",
    "failed",
    "jsonable",
    "met",
    "nothing_at_stake",
    "passed",
    "unknown",
    "unmet",
]


class Status(enum.Enum):
    PASS = "pass"
    FAIL = "fail"
    UNKNOWN = "unknown"  # the history cannot say: never a pass
    UNMET = "unmet"  # a premise the run did not meet: it tested nothing (a rig outcome)
    NOT_AT_STAKE = "not_at_stake"  # held only because its scope held nothing that could fail it


class Role(enum.StrEnum):
    VERDICT = "verdict"  # judges the system: pass, fail or unknown
    PREMISE = "premise"  # judges the run: met (pass) or unmet


def jsonable(value: Any) -> Any:
    """``value`` as JSON data: enums by value, metrics and sets as lists, dataclasses as dicts."""
    if isinstance(value, enum.Enum):
        return value.value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (set, frozenset)):
        return sorted((jsonable(v) for v in value), key=str)
    if isinstance(value, (list, tuple, range)):
        return [jsonable(v) for v in value]
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return str(value)


@dataclass(frozen=True)
class Evidence:
    """What a status rests on: measured ``values`` (seconds, counts, levels, the bound they
    were held to), the ``ops`` (request ids) and the moments ``at`` (seconds in the history)
    it points at, the first few of each."""

    values: dict[str, Any] = field(default_factory=dict)
    ops: tuple[str, ...] = ()
    at: tuple[float, ...] = ()

    def as_json(self) -> dict[str, Any]:
        return {"values": jsonable(self.values), "ops": list(self.ops), "at": [round(t, 3) for t in self.at]}

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> Evidence:
        return cls(dict(raw.get("values", {})), tuple(raw.get("ops", ())), tuple(raw.get("at", ())))


@dataclass(frozen=True)
class Finding:
    """What a verdict's judge returns: its status, its sentence, its evidence."""

    status: Status
    message: str
    evidence: Evidence = Evidence()


def _finding(status: Status, message: str, ops: Iterable[str], at: Iterable[float], values: dict[str, Any]) -> Finding:
    return Finding(status, message, Evidence(values, tuple(ops)[:8], tuple(at)[:8]))


def passed(message: str, *, stake: int, ops: Iterable[str] = (), at: Iterable[float] = (), **values: Any) -> Finding:
    """A pass, resting on ``stake`` things that could have failed it (recorded as the
    evidence's ``at_stake``); with none, the verdict is not at stake, never a pass."""
    status = Status.PASS if stake > 0 else Status.NOT_AT_STAKE
    return _finding(status, message, ops, at, {**values, "at_stake": stake})


def nothing_at_stake(message: str, *, ops: Iterable[str] = (), at: Iterable[float] = (), **values: Any) -> Finding:
    """The verdict's scope held nothing that could have failed it: no request in its phase,
    no fault whose effect it judges, no worker a fault could have wrongly charged."""
    return _finding(Status.NOT_AT_STAKE, message, ops, at, {**values, "at_stake": 0})


def failed(message: str, *, ops: Iterable[str] = (), at: Iterable[float] = (), **values: Any) -> Finding:
    return _finding(Status.FAIL, message, ops, at, values)


def unknown(message: str, *, ops: Iterable[str] = (), at: Iterable[float] = (), **values: Any) -> Finding:
    return _finding(Status.UNKNOWN, message, ops, at, values)


def met(message: str, *, ops: Iterable[str] = (), at: Iterable[float] = (), **values: Any) -> Finding:
    """A premise that held."""
    return _finding(Status.PASS, message, ops, at, values)


def unmet(message: str, *, ops: Iterable[str] = (), at: Iterable[float] = (), **values: Any) -> Finding:
    return _finding(Status.UNMET, message, ops, at, values)


@dataclass(frozen=True)
class Verdict:
    """One judged verdict (or premise): ``kind`` is its declaration's name, ``name`` that
    with its parameters, for people."""

    kind: str
    name: str
    status: Status
    message: str
    params: dict[str, Any] = field(default_factory=dict)
    evidence: Evidence = Evidence()
    role: Role = Role.VERDICT
    by: str = "test"  # who declared it: the test, or the kit on its behalf ("settle")

    def __str__(self) -> str:
        return f"[{self.status.value.upper()}] {self.name}: {self.message}"

    def as_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "name": self.name,
            "role": self.role.value,
            "by": self.by,
            "status": self.status.value,
            "message": self.message,
            "params": jsonable(self.params),
            "evidence": self.evidence.as_json(),
        }
