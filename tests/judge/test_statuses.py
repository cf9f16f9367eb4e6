"""``chaos.judge.statuses``: a failed request's status says whose failure it was. Each rule
passes on a truthful history and fails on a crafted lie; histories written by hand."""

from __future__ import annotations

import pytest

from chaos import verdicts as v
from chaos.observe.history import History
from chaos.observe.logs import parse_engine_line
from chaos.observe.records import Complete, Invoke, LogEvent, Outcome, Phase
from tests.judge.histories import PDSIM_WAITING


def _failed(
    h: History, name: str, status: int | None, error: str = "", *, invalid: str = "", retry_after: str | None = None
) -> None:
    h.append(Invoke(0.0, 0.0, name, "/v1/chat/completions", False, phase=Phase.FAULT, invalid=invalid))
    h.append(Complete(1.0, 0.0, name, Outcome.CLEAN_ERROR, status, error, retry_after=retry_after))


def _released_by_the_waiting_timeout(h: History, name: str, rid: str = "r1", at: float = 0.9) -> None:
    fields = parse_engine_line(PDSIM_WAITING) | {"rid": rid}
    h.append(LogEvent(at, "decode", PDSIM_WAITING, op=name, fields=fields))


def test_a_release_logged_after_the_answer_is_not_what_it_tells():
    """The answer came at 1.0 s: a timeout's release logged 3 s later (decode's death ended
    the stream; the timeout let its room go after) is not what the answer had to tell; one
    logged just before it is."""
    later, before = History(), History()
    for h, at in ((later, 4.0), (before, 0.9)):
        _failed(h, "a", 200, "Stream error: error decoding response body")
        _released_by_the_waiting_timeout(h, "a", at=at)
    check = v.statuses_tell_the_truth()
    assert check(later).status is v.Status.PASS
    assert check(before).status is v.Status.FAIL and check(before).evidence.values["kinds"] == ["timeout_untold"]


def test_the_clients_own_error_is_a_4xx_and_no_other_failure_is():
    truthful, blamed_server, blamed_client = History(), History(), History()
    for h in (truthful, blamed_server, blamed_client):
        _failed(h, "outage", 503, "No available decode workers", retry_after="1")
        _failed(h, "shed", 429, "admission queue is at capacity", retry_after="1")  # "retry": not the client's error
    _failed(truthful, "too_long", 400, "longer than the context", invalid="over any context")
    _failed(blamed_server, "too_long", 500, "Prefill server error: 500", invalid="over any context")
    _failed(blamed_client, "too_long", 400, "longer than the context", invalid="over any context")
    _failed(blamed_client, "valid", 400, "Bad Request")
    check = v.statuses_tell_the_truth()
    judged = check(truthful)
    assert judged.status is v.Status.PASS and judged.evidence.values["invalid"] == 1
    assert judged.evidence.values["statuses"] == ["400", "429", "503"]
    lie = check(blamed_server)
    assert lie.status is v.Status.FAIL and lie.evidence.ops == ("too_long",)
    assert set(lie.evidence.values["lies"]) == {"too_long"}
    assert lie.evidence.values["kinds"] == ["client_error_as_service"]
    lie = check(blamed_client)
    assert lie.status is v.Status.FAIL and lie.evidence.ops == ("valid",)


def test_a_request_a_timeout_released_is_told_as_one():
    told, hidden, by_status = History(), History(), History()
    _failed(told, "a", 500, "Decode transfer failed: Request 9069 timed out after 6.0s in KVPoll.WaitingForInput")
    _failed(hidden, "a", 500, "Internal Server Error")
    _failed(by_status, "a", 504, "Gateway Timeout: decode did not answer")
    for h in (told, hidden, by_status):
        _released_by_the_waiting_timeout(h, "a")
    check = v.statuses_tell_the_truth()
    assert check(told).status is v.Status.PASS and check(told).evidence.values["timed_out"] == 1
    assert check(by_status).status is v.Status.PASS
    lie = check(hidden)
    assert lie.status is v.Status.FAIL and "waiting timeout" in lie.evidence.values["lies"]["a"]
    # a retry's own failure is what the answer tells: a timeout released the first attempt only
    retried = History()
    _failed(retried, "a", 503, "No available servers: No available decode workers (all circuits open)", retry_after="1")
    _released_by_the_waiting_timeout(retried, "a")
    retried.append(LogEvent(0.95, "decode", "rid=r2 state=failed", op="a", fields={"rid": "r2", "state": "failed"}))
    assert check(retried).status is v.Status.PASS


def test_what_no_answer_reached_is_not_at_stake():
    h = History()
    h.append(Invoke(0.0, 0.0, "cut", "/v1/chat/completions", True, phase=Phase.FAULT))
    h.append(Complete(1.0, 0.0, "cut", Outcome.CONNECTION_ERROR, None, "Connection reset by peer"))
    assert v.statuses_tell_the_truth()(h).status is v.Status.NOT_AT_STAKE


def test_overload_says_when_to_retry():
    told, untold = History(), History()
    _failed(told, "shed", 429, "admission queue is at capacity", retry_after="1")
    _failed(told, "outage", 503, "No available decode workers", retry_after="5")
    _failed(untold, "shed", 429, "admission queue is at capacity")
    _failed(untold, "outage", 503, "No available decode workers", retry_after="5")
    check = v.statuses_tell_the_truth()
    assert check(told).status is v.Status.PASS
    lie = check(untold)
    assert lie.status is v.Status.FAIL and lie.evidence.ops == ("shed",)
    assert lie.evidence.values["kinds"] == ["no_retry_after"]


@pytest.mark.parametrize(
    ("error", "names"),
    [
        ("Prefill server error (500 Internal Server Error): boom", True),
        ("Decode transfer failed for request rank=0", True),
        ("Transport error: error sending request for url (http://127.0.0.1:18009/generate)", True),
        ("Internal Server Error", False),
        ("", False),
    ],
    ids=["prefill", "decode", "address", "bare", "empty"],
)
def test_a_service_failure_names_its_hop(error, names):
    h = History()
    _failed(h, "a", 502 if "Transport" in error else 500, error)
    judged = v.statuses_tell_the_truth()(h)
    assert (judged.status is v.Status.PASS) is names, judged.message
    if not names:
        assert judged.evidence.values["kinds"] == ["hop_unnamed"]


def _refused(h: History, name: str, status: int | None, error: str, took_s: float, outcome=Outcome.CLEAN_ERROR) -> None:
    h.append(Invoke(0.0, 0.0, name, "/v1/chat/completions", False, phase=Phase.FAULT, invalid="hostile"))
    h.append(Complete(took_s, 0.0, name, outcome, status, error))


def test_the_clients_own_errors_are_refused_clearly_in_time():
    def history(status: int | None, error: str, took_s: float, outcome=Outcome.CLEAN_ERROR) -> History:
        h = History()
        _refused(h, "fine", 400, "Invalid JSON: EOF while parsing an object", 0.1)
        _refused(h, "x", status, error, took_s, outcome)
        h.append(Invoke(0.0, 0.0, "valid", "/v1/chat/completions", False, phase=Phase.FAULT))
        h.append(Complete(0.5, 0.0, "valid", Outcome.OK, 200, reply="hi"))  # not the client's error: not judged
        return h

    check = v.client_errors_refused(within_s=3.0)
    judged = check(history(413, "length limit exceeded", 0.2))
    assert judged.status is v.Status.PASS and judged.evidence.values["of"] == 2
    assert judged.evidence.values["statuses"] == ["400", "413"] and judged.evidence.values["worst_s"] == 0.2
    for status, error, took_s, outcome, why in (
        (500, "Internal Server Error", 0.2, Outcome.CLEAN_ERROR, "not a 4xx"),
        (400, "", 0.2, Outcome.CLEAN_ERROR, "saying nothing"),
        (408, "Request Timeout", 4.0, Outcome.CLEAN_ERROR, "only after 4.00s"),
        (None, "total deadline 33s", 33.0, Outcome.CLIENT_TIMEOUT, "no answer"),
        (200, "", 0.2, Outcome.OK, "served with 200"),
    ):
        found = check(history(status, error, took_s, outcome))
        assert found.status is v.Status.FAIL and found.evidence.ops == ("x",), (status, found)
        assert why in found.message, found.message
    assert check(History()).status is v.Status.UNKNOWN


def test_a_body_its_client_never_finished_may_be_refused_with_a_408():
    unfinished, malformed = History(), History()
    unfinished.append(Invoke(0.0, 0.0, "slow", "/generate", False, phase=Phase.FAULT, invalid="stops", unfinished=True))
    unfinished.append(Complete(30.0, 0.0, "slow", Outcome.CLEAN_ERROR, 408, "Request body was not complete"))
    _failed(malformed, "bad", 408, "Request Timeout", invalid="malformed JSON")
    assert v.statuses_tell_the_truth()(unfinished).status is v.Status.PASS
    assert v.statuses_tell_the_truth()(malformed).status is v.Status.FAIL  # "retry" a request no retry mends
