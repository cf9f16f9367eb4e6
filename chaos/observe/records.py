"""What a history holds: one frozen record per event (a request's invoke, chunks and
completion, a fault's stages, a metric sample, a trigger firing, a log line, a verdict), the
enums they carry, and their JSONL form. ``chaos.observe.history`` keeps them in time order;
``chaos.observe.phases`` reads them, so neither imports the other's store.
"""

from __future__ import annotations

import enum
import json
from dataclasses import asdict, dataclass, field
from typing import Any, TypeVar

__all__ = [
    "CREATED_AT_FIRST_INCREMENT",
    "HEAL_ONCE",
    "Chunk",
    "Complete",
    "Done",
    "FaultEvent",
    "Invoke",
    "LogEvent",
    "Op",
    "Outcome",
    "Phase",
    "R",
    "Record",
    "Sample",
    "Stage",
    "TriggerFired",
    "VerdictRecord",
    "decode_record",
    "encode_record",
]

# Counters SGLang (observability/metrics_collector.py, 0.5.9 and 0.5.23) and pdsim define but
# export only from their first increment: a scrape that answered without them means none yet.
CREATED_AT_FIRST_INCREMENT = frozenset({"num_bootstrap_failed_reqs_total", "num_transfer_failed_reqs_total"})


class Outcome(enum.Enum):
    """How a request ended; exactly one per request. Unknown is never success."""

    OK = "ok"
    CLEAN_ERROR = "clean_error"  # an error status, or a parseable SSE error/abort event
    TRUNCATED = "truncated"  # the stream ended without a finish or an error
    STALLED = "stalled"  # no bytes for longer than the stall bound while open
    CLIENT_TIMEOUT = "client_timeout"  # our own deadline fired
    CONNECTION_ERROR = "connection_error"  # refused or reset before any response
    # the client closed a stream on purpose after some events (a client abort): its own
    # decision, not a failure of the system; what the system does after it is judged elsewhere
    HUNG_UP = "hung_up"


class Phase(enum.StrEnum):
    """What a request was sent for. Verdicts compare phases (a fault's replies against the
    baseline's) and scope to them; a closed set, so a misspelt phase fails at the send.
    ``DERIVED`` (the default) is stated by nobody: ``History.ops`` gives such a request its
    workload's phase from the fault events (``chaos.observe.phases``)."""

    DERIVED = ""
    BASELINE = "baseline"  # fault-free: its replies are the reference
    FAULT = "fault"  # sent while a fault is coming, active or healing
    AFTER = "after"  # sent once the fault has healed
    PROBE = "probe"  # a recovery probe


class Stage(enum.StrEnum):
    """Where a fault is in its life; each stage is one ``FaultEvent``. An action has a start
    and an end: the fault takes effect between ``inject`` and ``verified``, and ends between
    ``heal`` and ``healed`` (a thaw through a deployment's commands can take a second)."""

    INJECT = "inject"
    VERIFIED = "verified"
    HEAL = "heal"
    HEALED = "healed"
    HEAL_VERIFIED = "heal_verified"
    HEAL_FAILED = "heal_failed"


@dataclass(frozen=True)
class Invoke:
    t: float
    wall: float
    op: str
    path: str
    stream: bool
    agent: str = ""
    round: int = -1
    context: str = ""  # digest of everything sent: equal contexts must give equal replies
    phase: Phase = Phase.DERIVED
    workload: str = ""  # the workload that sent it, e.g. "conversations#2": its phase is the workload's
    # what the request asked of the engine about its reply's end (``chaos.clients.client.asked_of``):
    # the tokens it may have, whether the model's end-of-sequence may end it, a stop condition
    max_tokens: int | None = None
    ignore_eos: bool = False
    stops: bool = False
    # why the request is the client's own error (over any context, a model nobody serves), or
    # "" for a request a healthy system serves: the status it gets must say whose error it was
    invalid: str = ""
    # the client never finished sending the body its head declared (``chaos.clients.unfinished``):
    # a 408, "you were too slow", is then the truth about its own error
    unfinished: bool = False
    kind: str = "invoke"

    def __post_init__(self) -> None:
        object.__setattr__(self, "phase", Phase(self.phase))  # a loaded string, or a typo: ValueError


@dataclass(frozen=True)
class Chunk:
    t: float
    op: str
    nbytes: int
    kind: str = "chunk"


@dataclass(frozen=True)
class Complete:
    t: float
    wall: float
    op: str
    outcome: Outcome
    status: int | None = None
    error: str = ""
    reply: str = ""
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    first_byte_t: float | None = None
    finish: str = ""  # the finish reason the reply gave (stop, length, abort), "" if none
    # an error answer's Retry-After header as sent; None where the answer had none (or no
    # answer came, or the client could not read its headers)
    retry_after: str | None = None
    kind: str = "complete"

    @property
    def ok(self) -> bool:
        return self.outcome is Outcome.OK


@dataclass(frozen=True)
class FaultEvent:
    t: float
    wall: float
    fault: str  # id, e.g. "kill:decode#1"
    stage: Stage
    description: str
    evidence: str = ""
    kind: str = "fault"
    implicates: tuple[str, ...] = ()  # the engines the fault strikes (a killed one, both ends of a broken link)
    action: str = ""  # what the fault does (its kind: kill, restart, freeze, down, ...): chaos.faults.kinds
    # what the fault did, counted by itself, at its heal (``Fault.figures``: packets held,
    # bytes corrupted); empty where a fault counts nothing
    figures: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "stage", Stage(self.stage))
        object.__setattr__(self, "implicates", tuple(self.implicates))


@dataclass(frozen=True)
class Sample:
    t: float
    source: str  # prefill | decode | router | toxiproxy | health
    values: dict[str, float]
    kind: str = "sample"


# What a fault's ``until`` is recorded as when it holds (``TriggerFired.trigger`` starts so):
# the fault is healed early, because what it waited for came (``chaos.faults.runner``)
HEAL_ONCE = "heal once"


@dataclass(frozen=True)
class TriggerFired:
    t: float
    trigger: str
    value: str
    kind: str = "trigger"


@dataclass(frozen=True)
class LogEvent:
    """A service's log line about one of the test's requests, with what it says parsed when
    it was captured (``chaos.observe.logs``): the ``op`` it is about and its ``fields``
    (an engine's rid, state, cached_tokens; smg's request_id)."""

    t: float
    service: str
    line: str
    op: str = ""
    fields: dict[str, str] = field(default_factory=dict)
    kind: str = "log"


@dataclass(frozen=True)
class VerdictRecord:
    """A verdict or premise as judged, kept so reports can be re-rendered and results read
    as data: ``check`` is its kind, ``params`` and ``evidence`` are ``chaos.judge`` records
    in JSON form (``Verdict.as_json``)."""

    t: float
    name: str
    status: str
    message: str
    check: str = ""
    role: str = "verdict"
    by: str = "test"
    params: dict[str, Any] = field(default_factory=dict)
    evidence: dict[str, Any] = field(default_factory=dict)
    kind: str = "verdict"


Record = Invoke | Chunk | Complete | FaultEvent | Sample | TriggerFired | LogEvent | VerdictRecord
R = TypeVar("R", Invoke, Chunk, Complete, FaultEvent, Sample, TriggerFired, LogEvent, VerdictRecord)
_TYPES: dict[str, type] = {
    c.kind: c for c in (Invoke, Chunk, Complete, FaultEvent, Sample, TriggerFired, LogEvent, VerdictRecord)
}


@dataclass(frozen=True)
class Op:
    """An invoke joined with its completion (None while unknown)."""

    invoke: Invoke
    complete: Complete | None
    chunks: tuple[Chunk, ...] = ()

    @property
    def outcome(self) -> Outcome | None:
        return self.complete.outcome if self.complete else None

    @property
    def latency(self) -> float | None:
        return self.complete.t - self.invoke.t if self.complete else None


@dataclass(frozen=True)
class Done(Op):
    """An op that completed: its completion is known, which the type says."""

    complete: Complete

    @property
    def outcome(self) -> Outcome:
        return self.complete.outcome

    @property
    def latency(self) -> float:
        return self.complete.t - self.invoke.t


def encode_record(rec: Record) -> str:
    d = asdict(rec)
    if isinstance(rec, Complete):
        d["outcome"] = rec.outcome.value
    return json.dumps(d, separators=(",", ":"))


def decode_record(line: str) -> Record:
    d = json.loads(line)
    cls = _TYPES[d["kind"]]
    if cls is Complete:
        d["outcome"] = Outcome(d["outcome"])
    record: Record = cls(**d)
    return record
