"""Phases derived from the fault events: the rule in ``chaos.observe.phases``, over a built history."""

from __future__ import annotations

from chaos.observe.history import History
from chaos.observe.records import Complete, FaultEvent, Invoke, Outcome, Phase, Stage


def _send(
    h: History, op: str, t: float, end: float | None, *, workload: str = "", phase: Phase = Phase.DERIVED
) -> None:
    h.records.append(Invoke(t, t, op, "/v1/chat/completions", True, context=op, phase=phase, workload=workload))
    if end is not None:
        h.records.append(Complete(end, end, op, Outcome.OK))


def _fault(h: History, inject: float, healed: float | None, fid: str = "kill#1") -> None:
    h.records.append(FaultEvent(inject, inject, fid, Stage.INJECT, "kill decode"))
    if healed is not None:
        h.records.append(FaultEvent(healed, healed, fid, Stage.HEALED, "kill decode"))


def _phases(h: History) -> dict[str, Phase]:
    return {o.invoke.op: o.invoke.phase for o in h.ops()}


def test_before_during_and_after_a_fault():
    h = History()
    _send(h, "early", 0.0, 1.0)
    _fault(h, 2.0, 4.0)
    _send(h, "during", 3.0, 3.5)
    _send(h, "straddles", 1.5, 2.5)
    _send(h, "late", 5.0, 6.0)
    assert _phases(h) == {
        "early": Phase.BASELINE,
        "during": Phase.FAULT,
        "straddles": Phase.FAULT,
        "late": Phase.AFTER,
    }


def test_a_workload_takes_one_phase_from_its_whole_span():
    """A conversation whose first rounds ended before the fault fired is one conversation
    of the fault, not a baseline with a fault tail."""
    h = History()
    _send(h, "round0", 0.0, 1.0, workload="conversations#1")
    _fault(h, 2.0, 4.0)
    _send(h, "round1", 5.0, 6.0, workload="conversations#1")
    assert _phases(h) == {"round0": Phase.FAULT, "round1": Phase.FAULT}


def test_a_stated_phase_wins():
    h = History()
    _fault(h, 2.0, 4.0)
    _send(h, "told", 3.0, 3.5, phase=Phase.AFTER)
    assert _phases(h) == {"told": Phase.AFTER}


def test_an_open_workload_before_any_fault_is_of_the_fault_to_come():
    """While it runs, a trigger waits on it as ``FAULT``; once it has ended with no fault
    in the test, it was a baseline."""
    h = History()
    _send(h, "open", 0.0, None, workload="background#1")
    _send(h, "done", 0.0, 0.5, workload="background#1")
    assert _phases(h) == {"open": Phase.FAULT, "done": Phase.FAULT}
    h.records.append(Complete(1.0, 1.0, "open", Outcome.OK))
    assert _phases(h) == {"open": Phase.BASELINE, "done": Phase.BASELINE}


def test_an_unhealed_fault_lasts_to_the_end():
    h = History()
    _fault(h, 2.0, None)
    _send(h, "much_later", 50.0, 51.0)
    assert _phases(h) == {"much_later": Phase.FAULT}


def test_an_open_workload_after_a_heal_is_of_the_next_fault():
    """A soak's next cycle: its conversation runs after the last fault healed, and the
    trigger of the next fault counts its requests as the fault's until it ends."""
    h = History()
    _fault(h, 1.0, 2.0)
    _send(h, "next", 3.0, None, workload="conversations#2")
    assert _phases(h) == {"next": Phase.FAULT}
    h.records.append(Complete(4.0, 4.0, "next", Outcome.OK))
    assert _phases(h) == {"next": Phase.AFTER}


def test_between_two_faults_is_after_the_first():
    h = History()
    _fault(h, 1.0, 2.0, "kill#1")
    _send(h, "between", 3.0, 4.0)
    _fault(h, 5.0, 6.0, "kill#2")
    assert _phases(h) == {"between": Phase.AFTER}


def test_history_scopes_by_the_derived_phase():
    h = History()
    _send(h, "early", 0.0, 1.0)
    _fault(h, 2.0, 4.0)
    _send(h, "during", 3.0, 3.5)
    assert [o.invoke.op for o in h.ops(phase=Phase.FAULT)] == ["during"]
    assert [o.invoke.op for o in h.ops(phase=Phase.BASELINE)] == ["early"]
