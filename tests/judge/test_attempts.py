"""``chaos.judge.attempts``: each check passes on a good history and fails (or is unknown) on a
crafted bad one, histories written by hand."""

from __future__ import annotations

import pytest

from chaos import verdicts as v
from chaos.observe.history import History
from chaos.observe.logs import parse_engine_line
from chaos.observe.records import LogEvent, Outcome, Phase
from tests.judge.histories import PDSIM_WAITING, fault, op, status


def _attempt(h: History, t: float, service: str, op_id: str, rid: str, state: str) -> None:
    h.append(LogEvent(t, service, f"rid={rid} state={state}", op=op_id, fields={"rid": rid, "state": state}))


def test_a_success_whose_every_decode_attempt_failed_hides_a_failure():
    """Decode logged the attempt failing and the client got a 200 all the same: a failure
    it was never told of; an attempt failed and a retry served is a true success."""
    hidden, retried, quiet = History(), History(), History()
    for h in (hidden, retried, quiet):
        op(h, "a", 0.0, 8.0, phase="fault")
    _attempt(hidden, 6.0, "decode", "a", "r1", "failed")
    _attempt(hidden, 7.5, "decode", "a", "r1", "finished")  # what it logged after does not undo the failure
    _attempt(retried, 6.0, "decode", "a", "r1", "failed")
    _attempt(retried, 7.5, "decode", "a", "r2", "finished")
    _attempt(quiet, 7.5, "decode", "a", "r1", "finished")
    check = v.failures_reach_the_client()
    judged = check(hidden)
    assert judged.status is v.Status.FAIL and judged.evidence.ops == ("a",), judged
    assert judged.evidence.values["service"] == "decode"
    assert status(check, retried) is v.Status.PASS
    assert status(check, quiet) is v.Status.NOT_AT_STAKE
    # the premise that the fault met a request is met by the hidden failure: a finding, not the rig's miss
    v.require(hidden, v.requests_affected(phase=Phase.FAULT, why="test"))
    from chaos.errors import PremiseNotMet

    with pytest.raises(PremiseNotMet, match="came too late"):
        v.require(quiet, v.requests_affected(phase=Phase.FAULT, why="test"))


def test_an_unclean_failure_says_what_decode_did_with_each_attempt():
    """A client timeout behind smg's retries reads "decode: 2 attempts, each waiting timeout
    after 6s", with the attempts as data: what explore needs to tell the known retry budget
    from a new find."""
    h = History()
    fault(h, 0.5, 30.0)
    op(h, "a", 0.0, 30.0, Outcome.CLIENT_TIMEOUT, error="ReadTimeout")
    for t, rid in ((6.0, "r1"), (12.0, "r2")):
        fields = parse_engine_line(PDSIM_WAITING) | {"rid": rid}
        h.append(LogEvent(t, "decode", PDSIM_WAITING, op="a", fields=fields))
    h.append(LogEvent(12.5, "decode", "rid=r3 state=running", op="a", fields={"rid": "r3", "state": "running"}))
    judged = v.failed_requests_are_clean()(h)
    assert judged.status is v.Status.FAIL
    assert judged.evidence.values["attempts"] == {"a": ["waiting timeout after 6s"] * 2 + ["open"]}
    assert judged.evidence.values["ended_by"] == {"a": ["waiting timeout"] * 2 + ["open"]}
    assert "decode: 3 attempts, waiting timeout after 6s, waiting timeout after 6s, open" in judged.message
    outside = v.outcomes_in(set())(h)
    assert outside.evidence.values["attempts"] == judged.evidence.values["attempts"]


def test_what_decode_did_with_each_attempt():
    from chaos.judge.attempts import attempts, endings, in_words

    h = History()
    for t, rid, state, line in (
        (1.0, "r1", "received", "rid=r1 state=received"),
        (2.0, "r1", "failed", PDSIM_WAITING),
        (2.5, "r1", "finished", "rid=r1 state=finished"),  # a failure, once logged, stands
        (3.0, "r2", "failed", "rid=r2 state=failed error=Aborted"),
        (4.0, "r3", "finished", "rid=r3 state=finished"),
        (4.5, "r4", "running", "rid=r4 state=running"),
    ):
        h.append(LogEvent(t, "decode", line, op="a", fields=parse_engine_line(line) | {"rid": rid, "state": state}))
    h.append(LogEvent(1.0, "prefill", "rid=p1 state=failed", op="a", fields={"rid": "p1", "state": "failed"}))
    h.append(LogEvent(1.0, "decode", "rid=x state=failed", op="other", fields={"rid": "x", "state": "failed"}))
    h.append(LogEvent(1.0, "decode", "no rid", op="a", fields={"state": "failed"}))
    assert attempts(h, "decode", ["a"]) == {"a": {"r1": "failed", "r2": "failed", "r3": "finished", "r4": ""}}
    ends = endings(h, ["a"])["a"]
    assert [str(e) for e in ends] == ["waiting timeout after 6s", "failed", "served", "open"]
    assert [e.by for e in ends] == ["waiting timeout", "failed", "served", "open"]
    assert [str(e) for e in endings(h, ["a"], "prefill")["a"]] == ["failed"]
    assert in_words(["served"]) == "decode: 1 attempt, served"
    assert in_words([]) == "decode: no attempt logged"
    assert in_words(["failed", "failed"], "prefill") == "prefill: 2 attempts, each failed"
    assert in_words(["failed", "served"]) == "decode: 2 attempts, failed, served"
