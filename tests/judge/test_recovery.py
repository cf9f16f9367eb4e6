"""``chaos.judge.recovery``: each check passes on a good history and fails (or is unknown) on a
crafted bad one, histories written by hand."""

from __future__ import annotations

from chaos import verdicts as v
from chaos.observe.history import History
from chaos.observe.records import Outcome
from chaos.observe.sampler import HEALTH
from tests.judge.histories import fault, op, series, status


def test_recovers():
    check = v.recovers(within_s=5)
    good, never, nothing = History(), History(), History()
    for h in (good, never, nothing):
        fault(h, 1.0, 2.0)
    op(good, "p", 3.0, 3.5)
    op(never, "p", 3.0, 3.5, Outcome.CLEAN_ERROR)
    op(never, "q", 8.0, 9.0)
    assert status(check, good) is v.Status.PASS
    assert status(check, never) is v.Status.FAIL
    assert status(check, nothing) is v.Status.UNKNOWN


def test_recovers_after_each_heal():
    """Each heal is judged on the requests sent between it and the next fault: a first heal
    never recovered from fails even though the last one recovered; a heal with nothing sent
    before the next fault is unknown."""
    check = v.recovers_after_each_heal(within_s=5)
    good, first_lost, silent = History(), History(), History()
    for h in (good, first_lost, silent):
        fault(h, 1.0, 2.0)
        fault(h, 20.0, 21.0)
        op(h, "last", 22.0, 22.5)
    op(good, "p", 3.0, 3.5)
    op(first_lost, "p", 3.0, 3.5, Outcome.CLEAN_ERROR)
    op(first_lost, "q", 10.0, 10.5)  # a success, but 8.5 s after its heal
    assert status(check, good) is v.Status.PASS
    assert status(check, first_lost) is v.Status.FAIL and "1 heal(s)" in check(first_lost).message
    assert status(v.recovers(within_s=5), first_lost) is v.Status.PASS  # the last heal alone hides it
    assert status(check, silent) is v.Status.UNKNOWN
    assert status(check, History()) is v.Status.UNKNOWN


def test_recovers_from_when_a_held_engine_answers_again():
    """With ``ready``, the clock starts at the watched engine's first 200 after the heal; an
    engine never back leaves it at the heal, and an engine never watched is unknown."""
    check = v.recovers(within_s=5, ready=("prefill",))
    caught_up, never_back, unwatched = History(), History(), History()
    for h in (caught_up, never_back, unwatched):
        fault(h, 1.0, 2.0)
        op(h, "q", 3.0, 14.0)  # 12 s after the heal
    series(caught_up, HEALTH, "prefill", [(1.5, 0.0), (2.5, 0.0), (10.0, 1.0)])  # back 8 s after the heal
    series(never_back, HEALTH, "prefill", [(1.5, 0.0), (2.5, 0.0), (10.0, 0.0)])
    series(unwatched, HEALTH, "decode", [(10.0, 1.0)])
    assert status(check, caught_up) is v.Status.PASS and "(8.00s after the heal)" in check(caught_up).message
    assert status(check, never_back) is v.Status.FAIL and "never answered 200" in check(never_back).message
    assert status(check, unwatched) is v.Status.UNKNOWN
    assert status(v.recovers(within_s=5), caught_up) is v.Status.FAIL  # from the heal itself: 12 s


def test_each_heal_is_judged_by_the_requests_before_the_next_injection():
    """A request sent during the second fault, or at its very injection, says nothing of
    the recovery from the first."""
    from chaos.observe.records import FaultEvent, Stage

    h = History()
    for t, stage in ((1.0, Stage.INJECT), (2.0, Stage.HEALED), (3.0, Stage.INJECT), (4.0, Stage.HEALED)):
        h.append(FaultEvent(t, 0.0, f"f#{int(t + 1) // 2}", stage, "SIGKILL decode"))
    op(h, "at_inject", 3.0, 3.25)
    op(h, "during", 3.5, 3.75)
    op(h, "after", 4.25, 4.5)
    found = v.recovers_after_each_heal(within_s=5.0)(h)
    assert found.status is v.Status.UNKNOWN and found.evidence.at == (2.0,)
