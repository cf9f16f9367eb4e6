"""``chaos.judge.premises``: each check passes on a good history and fails (or is unknown) on a
crafted bad one, histories written by hand."""

from __future__ import annotations

import pytest

from chaos import verdicts as v
from chaos.observe.history import History
from chaos.observe.records import Outcome, Phase
from tests.judge.histories import fault, op, status


def test_ended_as_is_a_premise():
    abandoned, refused = History(), History()
    op(abandoned, "a", 0, 1.0, Outcome.CLIENT_TIMEOUT, phase="fault")
    op(refused, "a", 0, 0.1, Outcome.CLEAN_ERROR, phase="fault", error="503 model not found")
    check = v.ended_as(Outcome.CLIENT_TIMEOUT, phase=Phase.FAULT, why="in flight when abandoned")
    assert status(check, abandoned) is v.Status.PASS
    assert (
        status(check, refused) is v.Status.UNMET and "503 model not found" in check(refused).message
    )  # never a fail: nothing was tested


def test_open_at_fault_is_a_premise():
    met, missed = History(), History()
    for h in (met, missed):
        fault(h, 1.0, 2.0)
    op(met, "a", 0.5, 3.0, phase="fault")
    op(missed, "a", 0.1, 0.5, phase="fault")  # done before the SIGTERM
    check = v.open_at_fault(phase=Phase.FAULT, why="decode had them")
    assert status(check, met) is v.Status.PASS
    assert status(check, missed) is v.Status.UNMET and "not open at the fault" in check(missed).message


def test_an_unmet_premise_keeps_when_the_fault_struck_and_what_it_met():
    from chaos.errors import PremiseNotMet

    h = History()
    fault(h, 2.0, 3.0)
    op(h, "open", 1.0, 2.5, phase="fault")  # open when it struck, and it succeeded
    op(h, "done", 0.0, 1.5, phase="fault")  # done before
    op(h, "edge", 2.0, 2.2, phase="fault")  # sent at the very moment: not open before it
    judged = v.requests_affected(phase=Phase.FAULT, why="t")(h)
    assert judged.status is v.Status.UNMET
    assert judged.evidence.values == {
        "requests": 3,
        "fault_at": 2.0,
        "open_at_fault": 1,
        "open_at_fault_ended": ["ok"],
    }, judged.evidence
    with pytest.raises(PremiseNotMet):
        v.require(h, v.requests_affected(phase=Phase.FAULT, why="t"))


def test_a_fault_that_met_no_request_is_no_premise_met():
    h = History()
    fault(h, 1.0, 2.0)
    assert v.open_at_fault(phase=Phase.FAULT, why="decode had them")(h).status is v.Status.UNMET


def test_fault_did_asks_what_the_fault_counted_at_its_heal():
    from chaos.observe.records import FaultEvent, Stage

    did, idle, unhealed = History(), History(), History()
    for h, corrupted in ((did, 7.0), (idle, 0.0)):
        h.append(FaultEvent(1.0, 0.0, "packet#1", Stage.INJECT, "corrupt kv"))
        h.append(FaultEvent(2.0, 0.0, "packet#1", Stage.HEAL_VERIFIED, "corrupt kv", figures={"corrupted": corrupted}))
    unhealed.append(FaultEvent(1.0, 0.0, "packet#1", Stage.INJECT, "corrupt kv"))
    check = v.fault_did("corrupted", why="bytes flipped")
    judged = check(did)
    assert judged.status is v.Status.PASS and judged.evidence.values == {"figure": "corrupted", "count": 7}
    assert status(check, idle) is v.Status.UNMET and "no fault counted any corrupted" in check(idle).message
    assert status(check, unhealed) is v.Status.UNMET


def test_requests_slowed_is_a_premise():
    """The fault's requests took longer than the baseline's, from the first sent to the last
    served, by the asked delay; a delay that slowed nothing is unmet (nothing of "slow, not
    stuck" was tested)."""
    slowed, unslowed, none_served = History(), History(), History()
    for h in (slowed, unslowed, none_served):
        op(h, "b1", 0.0, 0.3, phase="baseline")
        op(h, "b2", 0.0, 0.5, phase="baseline")
    op(slowed, "f1", 1.0, 1.9, phase="fault")
    op(slowed, "f2", 1.0, 2.0, phase="fault")
    op(unslowed, "f1", 1.0, 1.5, phase="fault")
    op(unslowed, "f2", 1.0, 1.6, phase="fault")
    op(none_served, "f1", 1.0, 2.0, Outcome.CLEAN_ERROR, phase="fault")
    check = v.requests_slowed(by_s=0.4, why="the link was delayed 0.8 s")
    assert status(check, slowed) is v.Status.PASS and check(slowed).evidence.values["fault_s"] == 1.0
    assert status(check, unslowed) is v.Status.UNMET and "slowed by 0.10s, not 0.4s" in check(unslowed).message
    assert status(check, none_served) is v.Status.UNMET


def test_requests_slowed_counts_the_span_not_each_requests_place_in_the_queue():
    """pdsim at a4bfed9 (bench/flake.py, run 4 of 5): three requests sent together queue
    behind one another; the delayed link slowed the last one, while the baseline's order made
    its medians the slower. The span sees the delay."""
    h = History()
    for name, took in (("b1", 0.43), ("b2", 1.07), ("b3", 1.07)):
        op(h, name, 0.35, 0.35 + took, phase="baseline")
    for name, took in (("f1", 1.02), ("f2", 1.02), ("f3", 1.34)):
        op(h, name, 1.43, 1.43 + took, phase="fault")
    judged = v.requests_slowed(by_s=0.05, why="the kv link was delayed 100 ms")(h)
    assert judged.status is v.Status.PASS and judged.evidence.values["baseline_s"] == 1.07, judged
