"""A run's results as data: each test's ``result.json`` (``chaos.reports.summary.result_of``)
read back into types. The kill matrix, the flake bench and the parallel check read these,
never the JUnit XML or a verdict's wording."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from chaos.judge.known import holds
from chaos.judge.model import Evidence, Role, Status

__all__ = ["JudgedVerdict", "TestResult", "load_results"]


@dataclass(frozen=True)
class JudgedVerdict:
    kind: str
    role: Role
    status: Status
    name: str
    message: str
    params: dict[str, Any]
    evidence: Evidence
    by: str = "test"  # who declared it: the test, or the kit on its behalf (settle, universal)

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> JudgedVerdict:
        return cls(
            raw["kind"],
            Role(raw["role"]),
            Status(raw["status"]),
            raw["name"],
            raw["message"],
            raw.get("params", {}),
            Evidence.from_json(raw.get("evidence", {})),
            raw.get("by", "test"),
        )

    def __str__(self) -> str:
        return f"[{self.status.value.upper()}] {self.name}: {self.message}"


@dataclass(frozen=True)
class TestResult:
    """One test as the run recorded it. ``outcome`` is the report's: "failed" only when a
    verdict failed or was unknown (a rig error in the body is "error")."""

    __test__ = False  # not a pytest class, whatever its name

    test: str
    outcome: str
    verdicts: tuple[JudgedVerdict, ...]
    message: str
    known: tuple[dict[str, Any], ...]

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> TestResult:
        return cls(
            raw["test"],
            raw["outcome"],
            tuple(JudgedVerdict.from_json(v) for v in raw["verdicts"]),
            raw.get("message", ""),
            tuple(raw.get("known", ())),
        )

    def judged(self, status: Status, role: Role = Role.VERDICT) -> list[JudgedVerdict]:
        return [v for v in self.verdicts if v.status is status and v.role is role]

    def unsure(self) -> list[JudgedVerdict]:
        """Verdicts that kept the test from passing without failing: unknown, or the
        test's own not at stake (the kit's may be: ``chaos.judge.known.holds``)."""
        return [*self.judged(Status.UNKNOWN), *(v for v in self.judged(Status.NOT_AT_STAKE) if not holds(v))]

    def judged_not_passed(self) -> list[JudgedVerdict]:
        """Premises unmet, then verdicts failed, then unknown or not at stake: what a
        reader wants first."""
        return [*self.judged(Status.UNMET, Role.PREMISE), *self.judged(Status.FAIL), *self.unsure()]


def load_results(folder: Path) -> list[TestResult]:
    """Every test's result under ``folder`` (a run's report folder, or a folder of runs)."""
    return [TestResult.from_json(json.loads(p.read_text())) for p in sorted(Path(folder).rglob("result.json"))]
