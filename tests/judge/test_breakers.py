"""``chaos.judge.breakers``: each check passes on a good history and fails (or is unknown) on a
crafted bad one, histories written by hand."""

from __future__ import annotations

from chaos import verdicts as v
from chaos.observe.history import History
from chaos.observe.records import FaultEvent, Sample, Stage
from tests.judge.histories import fault, status


def _charges(h: History, t: float, prefill: float, decode: float) -> None:
    """One smg sample: the failures charged to each worker's breaker (decode's series listed,
    its failure series created at its first failure, as smg does)."""
    values = {"smg_worker_cb_outcomes_total:P": 5.0 + prefill, "smg_worker_cb_outcomes_total:D": 5.0 + decode}
    values |= {f"smg_worker_cb_outcomes_total:{w}:failure": n for w, n in (("P", prefill), ("D", decode)) if n}
    h.append(Sample(t, "router", values))


def test_charged_only_where_struck():
    check = v.charged_only_where_struck({"prefill": "P", "decode": "D"})
    fair, unfair, client, restarted = History(), History(), History(), History()
    for h in (fair, unfair, restarted):
        fault(h, 1.0, 2.0)  # SIGKILL decode: it strikes decode only
        h.append(FaultEvent(1.0, 0.0, "kill#1", Stage.INJECT, "SIGKILL decode", implicates=("decode",)))
    for t, d in ((0.5, 0), (1.5, 3), (2.5, 3)):
        _charges(fair, t, 0, d)
        _charges(unfair, t, d, d)
    client.append(FaultEvent(1.0, 0.0, "client#1", Stage.INJECT, "bad requests"))
    for t, n in ((0.5, 0), (1.5, 1)):
        _charges(client, t, n, 0)
    for t, p in ((0.5, 4), (1.5, 0), (2.5, 2)):  # smg restarted: its counters begin again
        _charges(restarted, t, p, 0)
    assert status(check, fair) is v.Status.PASS and "decode 3 (struck)" in check(fair).message
    assert status(check, unfair) is v.Status.FAIL and "3 failure(s) to prefill's breaker" in check(unfair).message
    assert status(check, client) is v.Status.FAIL and "no engine" in check(client).message
    assert status(check, restarted) is v.Status.FAIL and "2 failure(s) to prefill's" in check(restarted).message
    assert status(check, History()) is v.Status.UNKNOWN


def test_charges_are_read_from_the_router_alone_and_counted_from_the_last_reading():
    """A breaker at 1 failure that reaches 3 was charged 2; an engine's sample that happens
    to carry a figure of the same name is not smg's."""
    check = v.charged_only_where_struck({"prefill": "P", "decode": "D"})
    h = History()
    h.append(FaultEvent(1.0, 0.0, "kill#1", Stage.INJECT, "SIGKILL decode", implicates=("decode",)))
    for t, p in ((0.5, 1), (1.5, 3), (2.5, 3)):
        _charges(h, t, p, 0)
    h.append(Sample(2.0, "prefill", {"smg_worker_cb_outcomes_total:P": 0.0}))
    found = check(h)
    assert found.status is v.Status.FAIL and found.evidence.values["charged"] == {"prefill": 2.0, "decode": 0.0}
