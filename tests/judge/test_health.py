"""``chaos.judge.health``: each check passes on a good history and fails (or is unknown) on a
crafted bad one, histories written by hand."""

from __future__ import annotations

from chaos import verdicts as v
from chaos.observe.history import History
from chaos.observe.records import Outcome, Phase, Sample
from chaos.observe.sampler import HEALTH
from tests.judge.histories import fault, op, series, status


def test_health_tells_truth():
    truthful, lying, unwatched = History(), History(), History()
    for h in (truthful, lying):
        fault(h, 1.0, 2.0)
        series(h, "health", "decode", [(0.5, 1.0), (1.5, 1.0), (2.5, 1.0)])
    op(truthful, "a", 3.0, 3.5, phase="after")
    op(lying, "a", 3.0, 3.5, Outcome.CLEAN_ERROR, phase="after", error="Lost connection with prefill instance")
    op(unwatched, "a", 3.0, 3.5, phase="after")
    check = v.health_tells_truth("decode", phase=Phase.AFTER)
    assert status(check, truthful) is v.Status.PASS and "said 200 in 1 of 1" in check(truthful).message
    assert status(check, lying) is v.Status.FAIL and "Lost connection" in check(lying).message
    assert status(check, unwatched) is v.Status.UNKNOWN


def test_a_request_that_failed_while_health_said_503_is_no_lie():
    h = History()
    series(h, "health", "decode", [(0.5, 1.0), (2.5, 0.0)])
    op(h, "a", 3.0, 3.5, Outcome.CLEAN_ERROR, phase="after")
    assert status(v.health_tells_truth("decode", phase=Phase.AFTER), h) is v.Status.PASS


def test_not_ready_before_gone():
    graceful, abrupt, unseen = History(), History(), History()
    for h in (graceful, abrupt, unseen):
        fault(h, 1.0, 9.0)
    h = graceful
    for t, values in ((0.5, {"decode": 1.0}), (1.5, {"decode": 0.0}), (3.0, {})):  # 200, then 503, then no answer
        h.append(Sample(t, "health", values))
    for t, values in ((0.5, {"decode": 1.0}), (1.5, {}), (2.0, {"decode": 0.0})):  # dark first: a 503 after is too late
        abrupt.append(Sample(t, "health", values))
    unseen.append(Sample(1.5, "health", {"decode": 1.0}))
    check = v.not_ready_before_gone("decode")
    assert status(check, graceful) is v.Status.PASS and "no answer from +2.00s" in check(graceful).message
    assert status(check, abrupt) is v.Status.FAIL and "never saying" in check(abrupt).message
    assert status(check, unseen) is v.Status.UNKNOWN


def test_health_tells_truth_reads_the_latest_probe_before_each_end():
    """/health said 200, then 503 from 1.5 s: a failure at 2 s came while it said so, and is
    no lie; a probe at the failure's own instant counts as before it."""
    h = History()
    series(h, HEALTH, "decode", [(0.5, 0.0), (1.0, 1.0), (1.5, 0.0), (2.5, 1.0)])
    op(h, "a", 0.2, 2.0, Outcome.CLEAN_ERROR, phase="fault")
    op(h, "b", 0.3, 2.5, Outcome.CLEAN_ERROR, phase="fault")
    found = v.health_tells_truth("decode", phase=Phase.FAULT)(h)
    assert found.status is v.Status.FAIL and found.evidence.ops == ("b",)


def test_only_readiness_probes_after_the_fault_count():
    """Another source's sample after the fault is no probe: the engine never went unready."""
    h = History()
    fault(h, 1.0, 3.0)
    series(h, HEALTH, "decode", [(0.5, 0.0), (1.5, 1.0)])
    h.append(Sample(2.0, "decode", {"decode": 0.0}))
    h.append(Sample(2.5, HEALTH, {}))
    assert v.not_ready_before_gone("decode")(h).status is v.Status.FAIL
