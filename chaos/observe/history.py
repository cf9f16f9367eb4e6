"""One time-ordered record per test (Jepsen's history): client operations, faults, metric
samples, trigger firings, log events and verdicts. Verdicts are pure functions of it; reports draw it.

Records are frozen dataclasses appended as JSONL as they happen, so an interrupted run keeps
what it saw. Times: ``t`` is seconds on the monotonic clock since the history began, ``wall``
is Unix time (to join with engine logs).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Iterator

from chaos.observe.phases import derive
from chaos.observe.records import (
    CREATED_AT_FIRST_INCREMENT,
    Chunk,
    Complete,
    FaultEvent,
    Invoke,
    Op,
    Phase,
    R,
    Record,
    Sample,
    Stage,
    decode_record,
    encode_record,
)

__all__ = ["History"]


@dataclass
class History:
    """Thread-safe, append-only; ``path`` (optional) receives each record as a JSONL line."""

    path: Path | None = None
    seed: int = 0
    records: list[Record] = field(default_factory=list)
    started: float = field(default_factory=time.monotonic)
    started_wall: float = field(default_factory=time.time)

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        # open for the history's life, one line per record as it happens: closed by close()
        self._file = open(self.path, "a", buffering=1) if self.path else None  # noqa: SIM115

    def now(self) -> float:
        return time.monotonic() - self.started

    def append(self, rec: R) -> R:
        with self._lock:
            self.records.append(rec)
            if self._file is not None:
                self._file.write(encode_record(rec) + "\n")
        return rec

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    @classmethod
    def load(cls, path: Path) -> "History":
        h = cls()
        h.records = [decode_record(ln) for ln in Path(path).read_text().splitlines() if ln.strip()]
        return h

    # ---- queries (verdicts and reports use only these) --------------------------------------
    def of(self, kind: type) -> Iterator[Any]:
        with self._lock:
            snapshot = list(self.records)
        return (r for r in snapshot if isinstance(r, kind))

    def ops(self, *, phase: Phase | None = None) -> list[Op]:
        """Every request, its invoke carrying its phase: the stated one, or the one derived
        from the fault events (``chaos.observe.phases``); ``phase`` keeps only those of it."""
        invokes: dict[str, Invoke] = {}
        completes: dict[str, Complete] = {}
        chunks: dict[str, list[Chunk]] = {}
        for r in self.of(object):
            if isinstance(r, Invoke):
                invokes[r.op] = r
            elif isinstance(r, Complete):
                completes[r.op] = r
            elif isinstance(r, Chunk):
                chunks.setdefault(r.op, []).append(r)
        phases = derive(invokes.values(), completes, self.of(FaultEvent))
        return [
            Op(replace(i, phase=phases[k]), completes.get(k), tuple(chunks.get(k, ())))
            for k, i in invokes.items()
            if phase is None or phases[k] == phase
        ]

    def end_t(self) -> float:
        """The time of the last record (for a loaded history, "now" is its end)."""
        with self._lock:
            return max((r.t for r in self.records), default=0.0)

    def faults(self) -> list[FaultEvent]:
        return list(self.of(FaultEvent))

    def first_fault_t(self) -> float | None:
        return next((f.t for f in self.of(FaultEvent) if f.stage is Stage.INJECT), None)

    def last_fault_t(self) -> float | None:
        """When the last fault was injected (its ``inject`` event)."""
        injects = [f.t for f in self.of(FaultEvent) if f.stage is Stage.INJECT]
        return max(injects) if injects else None

    def last_heal_t(self) -> float | None:
        """When the last heal was done (its ``healed`` event)."""
        heals = [f.t for f in self.of(FaultEvent) if f.stage is Stage.HEALED]
        return max(heals) if heals else None

    def last_heal_began_t(self) -> float | None:
        """When the last heal began (its ``heal`` event): the earliest its effect can date from."""
        done = self.last_heal_t()
        if done is None:
            return None
        return max((f.t for f in self.of(FaultEvent) if f.stage is Stage.HEAL and f.t <= done), default=done)

    def series(self, source: str, metric: str) -> list[tuple[float, float]]:
        return [(s.t, s.values[metric]) for s in self.of(Sample) if s.source == source and metric in s.values]

    def counter_series(self, source: str, counter: str) -> list[tuple[float, float]]:
        """A counter's samples, for counters an engine creates at their first increment:
        once any sample of ``source`` shows the counter, every sample of that source without
        it reads 0 (before it appeared, or after a restart reset it). The PD failure counters
        (``CREATED_AT_FIRST_INCREMENT``) read 0 in every sample without them even if none
        shows them: SGLang and pdsim define them and export them only once incremented, so an
        answered scrape without them means no failure yet. Any other counter no sample shows
        stays empty: unknown, not 0."""
        samples = [s for s in self.of(Sample) if s.source == source]
        if counter not in CREATED_AT_FIRST_INCREMENT and not any(counter in s.values for s in samples):
            return []
        return [(s.t, s.values.get(counter, 0.0)) for s in samples]
