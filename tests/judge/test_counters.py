"""``chaos.judge.counters``: each check passes on a good history and fails (or is unknown) on a
crafted bad one, histories written by hand."""

from __future__ import annotations

from chaos import verdicts as v
from chaos.observe.history import History
from chaos.observe.pipeline import Metric
from chaos.observe.records import FaultEvent, Outcome, Sample, Stage
from tests.judge.histories import fault, op, series, status


def test_watchdog_fired():
    check = v.watchdog_fired("inflight", Metric("prefill", "fails"), timeout_s=4, slack_s=1)
    on_time, never, early = History(), History(), History()
    for h, rise in ((on_time, 5.3), (never, None), (early, 2.0)):
        fault(h, 1.0, 1.5)
        pts = [(t / 10, 0.0) for t in range(0, 90)]
        if rise is not None:
            pts = [(t, 1.0 if t >= rise else 0.0) for t, _ in pts]
        series(h, "prefill", "fails", pts)
    assert status(check, on_time) is v.Status.PASS
    assert status(check, never) is v.Status.FAIL and "never" in check(never).message
    assert status(check, early) is v.Status.FAIL and "+1.00s" in check(early).message
    short = History()
    fault(short, 1.0, 1.5)
    series(short, "prefill", "fails", [(0.5, 0.0), (2.0, 0.0)])
    assert status(check, short) is v.Status.UNKNOWN  # samples stop before the window closes


def test_a_watchdog_that_fired_early_fails_whatever_came_after():
    """Seen on an engine whose decode waiting timeout fired at 3 s instead of 6: the rise at
    +3.12 s is a definite failure, though the samples ended at +3.31 s, before the window
    [6 s, 7.5 s] closed, and though a later rise would have fallen inside it."""
    check = v.watchdog_fired("decode waiting", Metric("decode", "fails"), timeout_s=6, slack_s=1.5)
    cut_short, then_on_time = History(), History()
    for h, rises, end in ((cut_short, (4.12,), 4.31), (then_on_time, (4.12, 7.5), 12.0)):
        fault(h, 1.0, 1.2)
        series(
            h,
            "decode",
            "fails",
            [(t / 100, float(sum(t / 100 >= r for r in rises))) for t in range(0, int(end * 100) + 1, 10)]
            + [(end, float(len(rises)))],
        )
    for h in (cut_short, then_on_time):
        verdict = check(h)
        assert (
            verdict.status is v.Status.FAIL
            and "fired early" in verdict.message
            and "3.20s after the fault" in verdict.message
        ), verdict


def test_watchdog_fired_after_a_slow_heal_counts_from_when_the_heal_began():
    """A thaw through a deployment's commands took 1.3 s: the service resumed somewhere in
    between, so a watchdog that fired T after the heal began is on time, and one that fired
    before that is early."""
    check = v.watchdog_fired("inflight", Metric("prefill", "fails"), timeout_s=10, slack_s=3.5, since=v.Since.HEAL)
    on_time, early = History(), History()
    for h, rise in ((on_time, 35.8), (early, 35.0)):
        h.append(FaultEvent(12.0, 0.0, "freeze#1", Stage.INJECT, "freeze prefill"))
        h.append(FaultEvent(25.7, 0.0, "freeze#1", Stage.HEAL, "freeze prefill"))
        h.append(FaultEvent(27.0, 0.0, "freeze#1", Stage.HEALED, "freeze prefill"))
        series(h, "prefill", "fails", [(t / 10, 1.0 if t / 10 >= rise else 0.0) for t in range(0, 420)])
    assert status(check, on_time) is v.Status.PASS and "it took 1.30s" in check(on_time).message
    assert status(check, early) is v.Status.FAIL and "+9.30s" in check(early).message


def test_watchdog_fired_per_request_counts_from_the_first_request_into_the_fault():
    """SGLang's bootstrap timeout starts when a request reaches prefill: on a slow machine
    the first request went out 1.1 s after the blackhole and the counter rose 4.63 s after
    the fault, 3.53 s after that request, inside the window [3, 4.5] counted from it. A rise earlier than
    T after the first request cannot be that request's watchdog; before any request the
    verdict has nothing to count from."""
    check = v.watchdog_fired("bootstrap", Metric("prefill", "fails"), timeout_s=3, slack_s=1.5, since=v.Since.REQUEST)
    on_time, early, idle = History(), History(), History()
    for h, rise in ((on_time, 5.6), (early, 4.0), (idle, 5.6)):
        fault(h, 1.0, 8.0)
        op(h, "before", 0.2, 0.5)  # the baseline's, before the fault: not the clock's start
        if h is not idle:
            op(h, "a", 2.1, 5.7, Outcome.CLEAN_ERROR)
        series(h, "prefill", "fails", [(t / 10, 1.0 if t / 10 >= rise else 0.0) for t in range(0, 100)])
    assert (
        status(check, on_time) is v.Status.PASS
        and "3.50s after the first request into the fault" in check(on_time).message
    )
    assert status(check, early) is v.Status.FAIL and "+1.90s" in check(early).message
    assert status(check, idle) is v.Status.UNKNOWN


def test_counter_never_rises():
    check = v.counter_never_rises(Metric("decode", "fails"))
    flat, rose, idle = History(), History(), History()
    series(flat, "decode", "fails", [(0.1, 2), (0.2, 2)])
    series(rose, "decode", "fails", [(0.1, 2), (0.2, 3)])
    series(idle, "decode", "fails", [(0.1, 2), (0.2, 2)])
    op(flat, "a", 0.15, 0.3)  # a request it could have failed
    assert status(check, flat) is v.Status.PASS
    assert status(check, rose) is v.Status.FAIL
    assert status(check, idle) is v.Status.NOT_AT_STAKE  # flat, with no request to fail


def test_a_counter_created_at_its_first_increment_rises_from_zero():
    """SGLang has no series for a failure counter until its first .inc(): an answered scrape
    without it reads 0; with no scrape answered, nothing is known."""
    h = History()
    fault(h, 1.0, 1.5)
    for t in (0.5, 1.0, 2.0, 3.0):
        h.append(Sample(t, "prefill", {"num_running_reqs": 0.0}))
    h.append(Sample(4.1, "prefill", {"num_running_reqs": 0.0, "num_bootstrap_failed_reqs_total": 1.0}))
    h.append(Sample(6.0, "prefill", {"num_running_reqs": 0.0, "num_bootstrap_failed_reqs_total": 1.0}))
    fired = v.watchdog_fired(
        "bootstrap", Metric("prefill", "num_bootstrap_failed_reqs_total"), timeout_s=3.0, slack_s=1.5
    )
    assert status(fired, h) is v.Status.PASS
    assert status(v.counter_never_rises(Metric("prefill", "num_bootstrap_failed_reqs_total")), h) is v.Status.FAIL
    never = History()  # the engine answered every scrape and never created the counter: no failure
    fault(never, 1.0, 1.5)
    op(never, "a", 1.0, 2.0, Outcome.CLEAN_ERROR)
    for t in (0.5, 2.0, 9.0):
        never.append(Sample(t, "prefill", {"num_running_reqs": 0.0}))
    assert (
        status(fired, never) is v.Status.FAIL
        and status(v.counter_never_rises(Metric("prefill", "num_bootstrap_failed_reqs_total")), never) is v.Status.PASS
    )
    other = v.counter_never_rises(Metric("prefill", "some_other_counter_total"))  # not known to be created lazily
    assert status(other, never) is v.Status.UNKNOWN
    silent = History()  # the engine never answered: nothing is known
    fault(silent, 1.0, 1.5)
    assert status(fired, silent) is v.Status.UNKNOWN


def test_a_watchdog_whose_samples_end_too_soon_is_unknown_at_their_end():
    counter = Metric("prefill", "num_bootstrap_failed_reqs_total")
    h = History()
    fault(h, 1.0, 9.0)
    series(h, "prefill", counter.name, [(0.5, 0.0), (1.5, 0.0), (2.0, 0.0)])
    found = v.watchdog_fired("bootstrap", counter, timeout_s=2.0, slack_s=1.0)(h)
    assert found.status is v.Status.UNKNOWN and found.evidence.at == (1.0, 2.0)
