"""``chaos.judge.judging``: each check passes on a good history and fails (or is unknown) on a
crafted bad one, histories written by hand."""

from __future__ import annotations

import pytest

from chaos import verdicts as v
from chaos.observe.history import History
from chaos.observe.records import Outcome, Phase, VerdictRecord
from tests.judge.histories import op


def test_expect_raises_on_fail_and_unknown_and_names_the_verdict():
    h = History()
    op(h, "a", 0, None)
    with pytest.raises(v.VerdictFailed, match=r"\[FAIL\] every_request_terminal"):
        v.expect(h, v.every_request_terminal(within_s=1))
    with pytest.raises(v.VerdictFailed, match=r"\[UNKNOWN\] recovers"):
        v.expect(h, v.recovers(within_s=1))


def test_a_verdict_that_raises_is_unknown_and_a_premise_unmet():
    @v.verdict(lambda **_: "broken")
    def broken(_: History) -> v.Finding:
        raise KeyError("boom")

    @v.premise(lambda **_: "broken_premise")
    def broken_premise(_: History) -> v.Finding:
        raise KeyError("boom")

    verdict, premise = v.evaluate(History(), [broken(), broken_premise()])
    assert verdict.status is v.Status.UNKNOWN and "KeyError" in verdict.message
    assert premise.status is v.Status.UNMET and premise.role is v.Role.PREMISE


def test_judge_takes_verdicts_and_require_takes_premises():
    from chaos.errors import PremiseNotMet

    h = History()
    op(h, "a", 0, 1, Outcome.OK, phase="fault")
    with pytest.raises(TypeError, match="require takes premises"):
        v.require(h, v.recovers(within_s=1))
    with pytest.raises(PremiseNotMet, match=r"\[UNMET\] requests_affected\(fault\)"):
        v.require(h, v.requests_affected(phase=Phase.FAULT, why="the fault came late"))
    [record] = list(h.of(VerdictRecord))
    assert (record.check, record.role, record.status) == ("requests_affected", "premise", "unmet")
    assert record.evidence["values"]["requests"] == 1 and record.evidence["ops"] == ["a"]


def test_a_premise_that_did_not_hold_is_neither_pass_nor_fail():
    """requests_affected: a fault that reached no request tested nothing; require() raises
    PremiseNotMet (a rig error), never VerdictFailed, and records the premise."""
    from chaos.errors import PremiseNotMet

    h = History()
    op(h, "op1", 0.0, 0.5, phase="fault")
    with pytest.raises(PremiseNotMet, match="came too late"):
        v.require(h, v.requests_affected(phase=Phase.FAULT, why="test"))
    op(h, "op2", 1.0, 1.5, Outcome.CLEAN_ERROR, phase="fault", error="boom")
    v.require(h, v.requests_affected(phase=Phase.FAULT, why="test"))  # one request met the fault
