"""Which phase a request belongs to, derived from the faults the history records.

An author states a phase only where the history cannot know it (``Phase.AFTER`` for a
clean test's second wave, a probe's ``Phase.PROBE``); every other request gets its
workload's phase from the fault events, judged over the workload as a whole so that a
conversation whose first rounds ended before the fault fired stays one conversation.

The rule, for a workload that started at ``start`` and ended at ``end`` (its last
request's end; open while any request is):

* it overlaps a fault, from its ``inject`` to its last heal event (open while unhealed):
  ``FAULT``;
* else, while it is still open: ``FAULT`` (a fault may be coming: a trigger waits on it);
* else it ended before any fault was injected: ``BASELINE``;
* else (it began after a fault had healed): ``AFTER``.

Reading the history while the test runs gives the same phases as reading it at the end,
except for a workload still open that no fault has met: ``FAULT`` until it ends, then
``BASELINE`` or ``AFTER`` if no fault came.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Mapping

from chaos.observe.records import Complete, FaultEvent, Invoke, Phase, Stage

__all__ = ["derive", "fault_spans"]

_ENDS = (Stage.HEALED, Stage.HEAL_VERIFIED, Stage.HEAL_FAILED)


@dataclass(frozen=True)
class _Span:
    start: float
    end: float  # math.inf while open

    def overlaps(self, other: "_Span") -> bool:
        return self.start <= other.end and other.start <= self.end


def fault_spans(faults: Iterable[FaultEvent], ends: Iterable[Stage] = _ENDS) -> list[tuple[float, float]]:
    """Each fault's span: from its ``inject`` to its last event of the ``ends`` stages
    (any heal event, for a phase; a verdict that asks when the fault was gone takes
    ``healed`` alone), ``math.inf`` while it has none."""
    closing = frozenset(ends)
    starts: dict[str, float] = {}
    last: dict[str, float] = {}
    for f in faults:
        if f.stage is Stage.INJECT:
            starts.setdefault(f.fault, f.t)
        elif f.stage in closing:
            last[f.fault] = max(last.get(f.fault, f.t), f.t)
    return [(t, last.get(fid, math.inf)) for fid, t in starts.items()]


def _phase(span: _Span, faults: list[_Span]) -> Phase:
    if span.end == math.inf or any(span.overlaps(f) for f in faults):
        return Phase.FAULT
    return Phase.BASELINE if all(span.end < f.start for f in faults) else Phase.AFTER


def derive(
    invokes: Iterable[Invoke], completes: Mapping[str, Complete], faults: Iterable[FaultEvent]
) -> dict[str, Phase]:
    """Each op's phase: the one its sender stated, or its workload's, by the rule above.
    Ops without a workload id are each a workload of their own."""
    spans = [_Span(start, end) for start, end in fault_spans(faults)]
    stated: dict[str, Phase] = {}
    groups: dict[str, list[str]] = {}
    bounds: dict[str, _Span] = {}
    for i in invokes:
        if i.phase is not Phase.DERIVED:
            stated[i.op] = i.phase
            continue
        key = i.workload or i.op
        groups.setdefault(key, []).append(i.op)
        end = completes[i.op].t if i.op in completes else math.inf
        was = bounds.get(key)
        bounds[key] = _Span(i.t, end) if was is None else _Span(min(was.start, i.t), max(was.end, end))
    derived = {op: _phase(bounds[key], spans) for key, ops in groups.items() for op in ops}
    return stated | derived
