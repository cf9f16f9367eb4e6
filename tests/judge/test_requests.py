"""``chaos.judge.requests``: each check passes on a good history and fails (or is unknown) on a
crafted bad one, histories written by hand."""

from __future__ import annotations

import pytest

from chaos import verdicts as v
from chaos.judge.requests import IN_FLIGHT_S
from chaos.observe.history import History
from chaos.observe.records import Chunk, Complete, FaultEvent, Invoke, Outcome, Phase, Stage
from tests.judge.histories import fault, op, status


def test_every_request_terminal():
    good, slow, hung = History(), History(), History()
    op(good, "a", 0, 1.0)
    op(slow, "a", 0, 9.0)
    op(hung, "a", 0, None)
    check = v.every_request_terminal(within_s=5)
    assert status(check, good) is v.Status.PASS
    assert status(check, slow) is v.Status.FAIL and "took 9.00s" in check(slow).message
    assert status(check, hung) is v.Status.FAIL and "never completed" in check(hung).message
    assert status(check, History()) is v.Status.NOT_AT_STAKE


@pytest.mark.parametrize("bad", [Outcome.TRUNCATED, Outcome.STALLED, Outcome.CLIENT_TIMEOUT, Outcome.CONNECTION_ERROR])
def test_failed_requests_are_clean(bad):
    good, unclean, late = History(), History(), History()
    for h in (good, unclean, late):
        fault(h, 1.0, 2.0)
    op(good, "a", 0, 1.5, Outcome.CLEAN_ERROR)
    op(unclean, "a", 0, 1.5, bad)
    op(late, "a", 0, 9.0, Outcome.CLEAN_ERROR)
    check = v.failed_requests_are_clean(within_s=3)
    assert status(check, good) is v.Status.PASS
    assert status(check, unclean) is v.Status.FAIL and bad.value in check(unclean).message
    assert status(check, late) is v.Status.FAIL
    probed = History()
    fault(probed, 1.0, 2.0)
    op(probed, "p", 2.1, 7.1, bad, phase="probe")  # the rig's own short patience: recovers judges it
    assert status(v.failed_requests_are_clean(), probed) is v.Status.NOT_AT_STAKE  # the probe alone: nothing judged
    assert status(v.failed_requests_are_clean(phase=Phase.PROBE), probed) is v.Status.FAIL  # asked for


def test_a_stream_its_client_hung_up_on_is_not_a_failure():
    h = History()
    fault(h, 1.0, 2.0)
    op(h, "a", 0, 1.5, Outcome.HUNG_UP)
    op(h, "b", 0, 1.5, Outcome.CLEAN_ERROR)
    judged = v.failed_requests_are_clean()(h)
    assert judged.status is v.Status.PASS and judged.evidence.values["failures"] == 1


def test_outcomes_in():
    check = v.outcomes_in({Outcome.TRUNCATED, Outcome.CLIENT_TIMEOUT})
    good, bad = History(), History()
    op(good, "a", 0, 1, Outcome.TRUNCATED)
    op(bad, "a", 0, 1, Outcome.STALLED)
    assert status(check, good) is v.Status.PASS
    assert status(check, bad) is v.Status.FAIL and "stalled" in check(bad).message


@pytest.mark.parametrize(
    ("stream", "outcome", "status", "finish", "reply", "agrees"),
    [
        (False, Outcome.CLEAN_ERROR, 500, "", "", True),  # an error status: the body's error agrees
        (False, Outcome.CLEAN_ERROR, 200, "", "", False),  # an error body under a 200
        (False, Outcome.CLEAN_ERROR, 200, "abort", "", True),  # SGLang's graceful abort says so
        (True, Outcome.CLEAN_ERROR, 200, "", "", True),  # a stream fails by an event after its 200
        (False, Outcome.OK, 200, "length", "", False),  # a success with no content, tokens counted
        (False, Outcome.OK, 200, "length", "text", True),
    ],
)
def test_status_agrees_with_body(stream, outcome, status, finish, reply, agrees):
    h = History()
    h.append(Invoke(0.0, 0.0, "a", "/v1/chat/completions", stream, max_tokens=2))
    h.append(
        Complete(
            1.0, 0.0, "a", outcome, status, "boom" if outcome is not Outcome.OK else "", reply, 5, 2, finish=finish
        )
    )
    judged = v.status_agrees_with_body()(h)
    assert judged.status is (v.Status.PASS if agrees else v.Status.FAIL), judged.message


def _streamed_through_a_kill(outcome: Outcome, last_chunk_t: float, action: str = "kill") -> History:
    """A stream begun at 0.2 s; decode SIGKILLed (or told to abort everything) at 1.0 s,
    verified gone (or the abort acknowledged) at 1.1 s."""
    h = History()
    h.append(FaultEvent(1.0, 0.0, "f#1", Stage.INJECT, f"{action} decode", implicates=("decode",), action=action))
    h.append(FaultEvent(1.1, 0.0, "f#1", Stage.VERIFIED, f"{action} decode", implicates=("decode",), action=action))
    h.append(Invoke(0.0, 0.0, "s", "/v1/chat/completions", True))
    t = 0.2
    while t <= last_chunk_t:
        h.append(Chunk(t, "s", 10))
        t += 0.1
    h.append(Complete(last_chunk_t + 0.01, 0.0, "s", outcome, 200, "", "text", 5, 8, first_byte_t=0.2))
    return h


@pytest.mark.parametrize(
    ("action", "outcome", "last_chunk_t", "hidden"),
    [
        ("kill", Outcome.OK, 3.0, True),  # bytes long after decode was gone, and a plain success
        ("kill", Outcome.CLEAN_ERROR, 3.0, False),  # smg told the client: nothing hidden
        ("kill", Outcome.OK, 1.2, False),  # the last bytes were already on their way
        ("abort_all", Outcome.OK, 3.0, True),  # decode acknowledged the abort, the stream went on to succeed
        ("abort_all", Outcome.OK, 2.0, False),  # within a scheduler pass of the acknowledgement
        ("abort_all", Outcome.CLEAN_ERROR, 3.0, False),  # ended with finish_reason abort
        ("freeze", Outcome.OK, 3.0, False),  # a frozen decode ends nothing: not at stake
    ],
)
def test_a_stream_decode_was_serving_does_not_outlive_its_kill(action, outcome, last_chunk_t, hidden):
    judged = v.no_hidden_fault(service="decode")(_streamed_through_a_kill(outcome, last_chunk_t, action))
    if action == "freeze":
        assert judged.status is v.Status.NOT_AT_STAKE
        return
    assert judged.status is (v.Status.FAIL if hidden else v.Status.PASS), judged.message


def test_no_hidden_fault_without_a_kill_is_not_at_stake():
    h = History()
    op(h, "a", 0, 1.0)
    assert v.no_hidden_fault(service="decode")(h).status is v.Status.NOT_AT_STAKE


@pytest.mark.parametrize(
    ("action", "outcome", "first_byte_t", "verdict"),
    [
        ("terminate", Outcome.OK, 0.2, v.Status.PASS),  # drained: the open stream finished
        ("terminate", Outcome.TRUNCATED, 0.2, v.Status.FAIL),  # cut by the SIGTERM
        ("terminate", Outcome.CLEAN_ERROR, 0.2, v.Status.FAIL),  # an error event is still a stream not drained
        ("terminate", Outcome.HUNG_UP, 0.2, v.Status.PASS),  # the client's own hang-up
        ("terminate", Outcome.CLEAN_ERROR, 1.5, v.Status.NOT_AT_STAKE),  # begun after the SIGTERM: may be refused
        ("kill", Outcome.TRUNCATED, 0.2, v.Status.NOT_AT_STAKE),  # a SIGKILL drains nothing: not judged
    ],
)
def test_a_stream_open_at_a_sigterm_finishes(action, outcome, first_byte_t, verdict):
    h = History()
    h.append(FaultEvent(1.0, 0.0, "f#1", Stage.INJECT, f"{action} decode", implicates=("decode",), action=action))
    h.append(FaultEvent(1.1, 0.0, "f#1", Stage.VERIFIED, f"{action} decode", implicates=("decode",), action=action))
    h.append(Invoke(0.0, 0.0, "s", "/v1/chat/completions", True))
    h.append(Complete(3.0, 0.0, "s", outcome, 200, "", "text", 5, 8, first_byte_t=first_byte_t))
    judged = v.sigterm_drains()(h)
    assert judged.status is verdict, judged.message


def test_unservable_turned_away():
    def sent(*ends: tuple[float | None, Outcome]) -> History:
        h = History()
        for i, (t1, outcome) in enumerate(ends):
            h.append(Invoke(0.0, 0.0, f"u{i}", "/v1/chat/completions", False, workload="background#3"))
            if t1 is not None:
                h.append(Complete(t1, 0.0, f"u{i}", outcome, 400 if outcome is not Outcome.OK else 200, "too long"))
        op(h, "other", 0, 30.0, Outcome.CLIENT_TIMEOUT, error="another workload's, not judged")
        return h

    check = v.unservable_turned_away(within_s=3.5, workload="background#3")
    assert status(check, sent((0.7, Outcome.CLEAN_ERROR))) is v.Status.PASS
    slow = check(sent((0.7, Outcome.CLEAN_ERROR), (9.0, Outcome.CLEAN_ERROR)))
    assert slow.status is v.Status.FAIL and slow.evidence.ops == ("u1",), slow.message
    assert status(check, sent((1.0, Outcome.OK))) is v.Status.FAIL  # served a prompt over the context
    assert status(check, sent((None, Outcome.OK))) is v.Status.FAIL  # never ended
    assert status(v.unservable_turned_away(within_s=3.5, workload="background#9"), sent()) is v.Status.NOT_AT_STAKE


def test_a_kill_counts_from_its_verification_and_on_its_own_service():
    """Gone at 1.1 s (verified), not at the heal; a kill has no scheduler pass to wait out;
    a kill of prefill says nothing of decode's streams."""
    late = _streamed_through_a_kill(Outcome.OK, 1.1 + IN_FLIGHT_S + 0.2)
    late.append(FaultEvent(9.0, 0.0, "f#1", Stage.HEALED, "kill decode", implicates=("decode",), action="kill"))
    assert v.no_hidden_fault(service="decode")(late).status is v.Status.FAIL
    prefill = History()
    for stage, t in ((Stage.INJECT, 1.0), (Stage.VERIFIED, 1.1)):
        prefill.append(FaultEvent(t, 0.0, "f#1", stage, "kill prefill", implicates=("prefill",), action="kill"))
    assert v.no_hidden_fault(service="decode")(prefill).status is v.Status.NOT_AT_STAKE


def test_outcomes_in_counts_each_outcome_it_allowed():
    h = History()
    fault(h, 1.0, 2.0)
    for name in ("a", "b"):
        op(h, name, 0.5, 1.5, Outcome.CLEAN_ERROR)
    found = v.outcomes_in({Outcome.OK, Outcome.CLEAN_ERROR})(h)
    assert found.status is v.Status.PASS and found.evidence.values["failures"] == {"clean_error": 2}


def test_an_error_body_disagrees_only_with_a_2xx_and_one_token_is_a_claim():
    """An error body under 299 is a contradiction, under 300 it is not; an empty 200 that
    claims one token disagrees with its body."""
    for status_code, outcome, reply, tokens, agrees in (
        (299, Outcome.CLEAN_ERROR, "", 0, False),
        (300, Outcome.CLEAN_ERROR, "", 0, True),
        (200, Outcome.OK, "", 1, False),
    ):
        h = History()
        h.append(Invoke(1.0, 0.0, "a", "/v1/chat/completions", False))
        h.append(Complete(2.0, 0.0, "a", outcome, status_code, "boom", reply, 8, tokens))
        assert (v.status_agrees_with_body()(h).status is v.Status.PASS) is agrees, status_code


def test_a_kill_strikes_from_its_injection_not_its_verification():
    """A stream whose first byte came between the kill and its verification had not begun
    when decode was struck: nothing of it is judged."""
    h = History()
    h.append(FaultEvent(1.0, 0.0, "f#1", Stage.INJECT, "kill decode", implicates=("decode",), action="kill"))
    h.append(FaultEvent(1.1, 0.0, "f#1", Stage.VERIFIED, "kill decode", implicates=("decode",), action="kill"))
    h.append(Invoke(0.0, 0.0, "s", "/v1/chat/completions", True))
    h.append(Chunk(3.0, "s", 10))
    h.append(Complete(3.01, 0.0, "s", Outcome.OK, 200, "", "text", 5, 8, first_byte_t=1.05))
    found = v.no_hidden_fault(service="decode")(h)
    assert found.status is v.Status.NOT_AT_STAKE


def test_a_bound_on_failures_puts_the_failures_at_stake_of_all_judged():
    h = History()
    fault(h, 0.5, 9.0)
    op(h, "ok", 1.0, 1.5)
    op(h, "failed", 1.0, 2.0, Outcome.CLEAN_ERROR, error="500")
    found = v.failed_requests_are_clean(within_s=3.0, since=v.Since.FAULT)(h)
    assert found.status is v.Status.PASS
    assert (found.evidence.values["at_stake"], found.evidence.values["requests"]) == (1, 2)


def test_a_truncation_after_the_heal_is_not_explained_by_the_fault():
    """A fault is gone at its heal, not when the rig later verified it: a stream that began
    between the two and was cut has no fault to blame."""
    h = History()
    for t, stage in ((1.0, Stage.INJECT), (2.0, Stage.HEALED), (3.0, Stage.HEAL_VERIFIED)):
        h.append(FaultEvent(t, 0.0, "kill#1", stage, "SIGKILL decode", implicates=("decode",), action="kill"))
    h.append(Invoke(2.2, 0.0, "s", "/v1/chat/completions", True))
    h.append(Complete(2.8, 0.0, "s", Outcome.TRUNCATED, 200, "cut", "", None, None, first_byte_t=2.5))
    assert v.outcomes_in({Outcome.OK, Outcome.TRUNCATED}, explained=True)(h).status is v.Status.FAIL


def test_valid_requests_are_served_whatever_the_clients_own_errors_got():
    def history(other: Outcome) -> History:
        h = History()
        op(h, "served", 0.0, 1.0, phase="fault")
        op(h, "other", 0.0, 2.0, other, phase="fault", error="cut")
        h.append(Invoke(0.5, 0.0, "hostile", "/generate", False, phase=Phase.FAULT, invalid="malformed JSON"))
        h.append(Complete(0.6, 0.0, "hostile", Outcome.CLEAN_ERROR, 400, "EOF while parsing"))
        op(h, "before", 0.0, 0.1, Outcome.CLIENT_TIMEOUT, phase="baseline")  # another phase: not judged
        return h

    check = v.valid_requests_served(phase=Phase.FAULT)
    judged = check(history(Outcome.OK))
    assert judged.status is v.Status.PASS and judged.evidence.values["of"] == 2
    found = check(history(Outcome.TRUNCATED))
    assert found.status is v.Status.FAIL and found.evidence.ops == ("other",)
    assert found.evidence.values["outcomes"] == ["truncated"]
    assert status(check, History()) is v.Status.NOT_AT_STAKE
