"""An episode as explore judges it: its state (passed, found, known, inconclusive, rig
error) read from its ``result.json``, its failures as data (``Signature``: two runs fail "the
same way" when they share one, never compared as text), and a find with its reproducer."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Collection

from chaos.explore.known import Known, known_for
from chaos.explore.schedule import Schedule
from chaos.judge.model import Status
from chaos.run.pytest_run import TIMED_OUT
from chaos.run.results import JudgedVerdict, TestResult
from chaos.targets.base import Capability

__all__ = ["Episode", "Find", "Signature", "classify"]


@dataclass(frozen=True)
class Signature:
    """A failure as data: the invariant and the kind of its evidence (the names of the
    values it measured, and those of its values that are categories: outcomes, statuses).
    Two runs fail "the same way" when they share a signature."""

    kind: str
    keys: tuple[str, ...]
    categories: tuple[tuple[str, str], ...]

    @classmethod
    def of(cls, v: JudgedVerdict) -> Signature:
        values = v.evidence.values
        cats = sorted(
            (k, json.dumps(val, sort_keys=True))
            for k, val in values.items()
            if isinstance(val, str) or (isinstance(val, list) and all(isinstance(x, str) for x in val))
        )
        return cls(v.kind, tuple(sorted(values)), tuple(cats))

    def __str__(self) -> str:
        cats = ", ".join(f"{k}={val}" for k, val in self.categories)
        return self.kind + (f" [{cats}]" if cats else "")


@dataclass
class Episode:
    """One schedule run and judged. ``state``: passed, found (an invariant failed and no
    known issue explains it), known (only known issues failed), inconclusive (a verdict
    could not say), rig error (the rig broke: a trigger, a fault, the stack)."""

    schedule: Schedule
    state: str
    file: Path
    seconds: float
    findings: list[JudgedVerdict] = field(default_factory=list)
    known: list[tuple[JudgedVerdict, Known]] = field(default_factory=list)
    why: str = ""

    def signatures(self) -> set[Signature]:
        return {Signature.of(v) for v in self.findings}


@dataclass
class Find:
    episode: Episode
    signature: Signature
    reproducer: Path
    shrunk: Schedule
    candidates: int
    reproduced: int
    reruns: int
    after_s: float  # from explore's start until the episode that found it ended

    @property
    def flaky(self) -> bool:
        """Failed once, and in none of its reruns: reported apart, never as found."""
        return self.reruns > 0 and self.reproduced == 0


def classify(
    schedule: Schedule, result: TestResult | None, caps: Collection[Capability], *, rc: int
) -> tuple[str, list[JudgedVerdict], list[tuple[JudgedVerdict, Known]], str]:
    """An episode's state from its result: a rig error stays one whatever its verdicts say."""
    if result is None:
        return "rig error", [], [], "timed out" if rc == TIMED_OUT else f"no result (pytest exited {rc})"
    if result.outcome == "passed":
        return "passed", [], [], ""
    if result.outcome != "failed":
        return "rig error", [], [], (result.message.splitlines() or [result.outcome])[0][:300]
    failed = result.judged(Status.FAIL)
    known = [(v, k) for v in failed if (k := known_for(schedule, v, caps))]
    found = [v for v in failed if all(v is not kv for kv, _ in known)]
    if found:
        return "found", found, known, str(found[0])
    if known:
        return "known", [], known, f"{known[0][0].kind}: {known[0][1].component} {known[0][1].version}"
    unsure = result.unsure()
    return "inconclusive", [], [], str(unsure[0]) if unsure else result.message[:300]
