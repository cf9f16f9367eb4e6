"""``chaos.judge.replies``: each check passes on a good history and fails (or is unknown) on a
crafted bad one, histories written by hand."""

from __future__ import annotations

import pytest

from chaos import verdicts as v
from chaos.observe.history import History
from chaos.observe.records import Complete, Invoke, Outcome, Phase
from tests.judge.histories import op, status


def test_replies_match_baseline():
    check = v.replies_match_baseline()
    good, wrong, none = History(), History(), History()
    for h in (good, wrong):
        op(h, "b", 0, 1, reply="amber basil", context="c1", phase="baseline")
    op(good, "f", 2, 3, reply="amber basil", context="c1", phase="fault")
    op(wrong, "f", 2, 3, reply="cedar delta", context="c1", phase="fault")
    op(none, "f", 2, 3, reply="x", context="c9", phase="fault")
    assert status(check, good) is v.Status.PASS
    assert status(check, wrong) is v.Status.FAIL and "cedar delta" in check(wrong).message
    assert status(check, none) is v.Status.UNKNOWN


def test_never_served_wrong_takes_a_failure_for_right_and_a_wrong_success_for_wrong():
    """Under corrupted KV failing is the engine's right: only a success with another reply
    than the baseline's fails; every request with a baseline context is at stake."""
    check = v.never_served_wrong(phase=Phase.FAULT)
    failed_all, served_right, served_wrong, unrelated = History(), History(), History(), History()
    for h in (failed_all, served_right, served_wrong, unrelated):
        op(h, "b", 0, 1, reply="amber basil", context="c1", phase="baseline")
    op(failed_all, "f", 2, 3, Outcome.CLEAN_ERROR, reply="", context="c1", phase="fault", error="KV checksum mismatch")
    op(served_right, "f", 2, 3, reply="amber basil", context="c1", phase="fault")
    op(served_wrong, "f", 2, 3, reply="amber cedar", context="c1", phase="fault")
    op(served_wrong, "g", 2, 3, Outcome.CLEAN_ERROR, reply="", context="c1", phase="fault")
    op(unrelated, "f", 2, 3, reply="x", context="c9", phase="fault")
    assert status(check, failed_all) is v.Status.PASS and check(failed_all).evidence.values["served"] == 0
    assert status(check, served_right) is v.Status.PASS
    wrong = check(served_wrong)
    assert wrong.status is v.Status.FAIL and wrong.evidence.values == {"wrong": 1, "of": 2}, wrong
    assert status(check, unrelated) is v.Status.UNKNOWN


def test_a_wrong_reply_shows_where_it_leaves_its_baseline():
    h = History()
    op(h, "b", 0, 1, reply="amber basil cedar", context="c1", phase="baseline")
    op(h, "f", 2, 3, reply="amber basil delta", context="c1", phase="fault")
    message = v.replies_match_baseline()(h).message
    assert "differs from char 12 of 17: got 'delta', baseline 'cedar'" in message, message


def _finished(h: History, name: str, *, asked: int, got: int, finish: str, ignore_eos: bool = True, stops=False):
    h.append(Invoke(0.0, 0.0, name, "/v1/chat/completions", True, max_tokens=asked, ignore_eos=ignore_eos, stops=stops))
    h.append(Complete(1.0, 0.0, name, Outcome.OK, 200, "", "text", 5, got, finish=finish))


@pytest.mark.parametrize(
    ("asked", "got", "finish", "ignore_eos", "stops", "truthful"),
    [
        (8, 8, "length", True, False, True),
        (8, 5, "length", True, False, False),  # cut short, and called "length"
        (8, 5, "stop", True, False, False),  # nothing could stop it
        (8, 5, "stop", False, False, True),  # the model's end of sequence may
        (8, 5, "stop", True, True, True),  # a stop string may
        (8, 9, "length", True, False, False),  # more than asked for
    ],
)
def test_finish_reasons_tell_the_truth(asked, got, finish, ignore_eos, stops, truthful):
    h = History()
    _finished(h, "a", asked=asked, got=got, finish=finish, ignore_eos=ignore_eos, stops=stops)
    judged = v.finish_reasons_tell_the_truth()(h)
    assert judged.status is (v.Status.PASS if truthful else v.Status.FAIL), judged.message


def test_finish_reasons_unjudged_without_token_counts_are_unknown_not_passed():
    h = History()
    op(h, "a", 0, 1.0)  # no max_tokens recorded
    assert v.finish_reasons_tell_the_truth()(h).status is v.Status.UNKNOWN
    assert v.finish_reasons_tell_the_truth()(History()).status is v.Status.UNKNOWN


def test_a_reply_without_a_count_is_not_judged_by_its_finish():
    h = History()
    h.append(Invoke(1.0, 0.0, "a", "/v1/chat/completions", True, max_tokens=8, ignore_eos=True))
    h.append(Complete(2.0, 0.0, "a", Outcome.OK, 200, "", "r", 8, None, 1.5, "stop"))
    h.append(Invoke(1.0, 0.0, "b", "/v1/chat/completions", True, max_tokens=8, ignore_eos=True))
    h.append(Complete(2.0, 0.0, "b", Outcome.OK, 200, "", "r", 8, 8, 1.5, "length"))
    found = v.finish_reasons_tell_the_truth()(h)
    assert found.status is v.Status.PASS and found.evidence.values["at_stake"] == 1


def test_a_failed_request_is_not_held_to_its_baseline_and_a_short_reply_differs_at_its_end():
    h = History()
    op(h, "base", 0.0, 0.5, reply="abcd", context="c1", phase="baseline")
    op(h, "failed", 1.0, 1.5, Outcome.CLEAN_ERROR, reply="", context="c1", phase="fault")
    assert v.replies_match_baseline()(h).status is v.Status.UNKNOWN  # no success shares the context
    op(h, "short", 2.0, 2.5, reply="abc", context="c1", phase="after")
    found = v.replies_match_baseline()(h)
    assert found.status is v.Status.FAIL and found.evidence.ops == ("short",)
    assert found.evidence.values["first_difference_at"] == [3]


def test_a_stop_at_max_tokens_under_ignore_eos_is_no_lie():
    h = History()
    h.append(Invoke(1.0, 0.0, "a", "/v1/chat/completions", True, max_tokens=8, ignore_eos=True))
    h.append(Complete(2.0, 0.0, "a", Outcome.OK, 200, "", "r", 8, 8, 1.5, "stop"))
    assert v.finish_reasons_tell_the_truth()(h).status is v.Status.PASS
