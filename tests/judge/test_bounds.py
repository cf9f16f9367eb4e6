"""Each bound holds on its own edge: a measure equal to a bound is within it, one a hair
over is not. Times here are sums of binary fractions, so the edges are exact; mutation
testing found every ``<=`` below could be ``<`` unnoticed."""

from __future__ import annotations

from chaos import verdicts as v
from chaos.judge.clock import SAMPLE_TOLERANCE_S
from chaos.observe.history import History
from chaos.observe.pipeline import PREFILL_LOST, Metric
from chaos.observe.records import HEAL_ONCE, Complete, Invoke, Outcome, TriggerFired
from chaos.observe.sampler import HEALTH
from tests.judge.histories import fault, op, series

HAIR = 1 / 64


def _latency(seconds: float, outcome: Outcome = Outcome.OK, workload: str = "") -> History:
    h = History()
    h.append(Invoke(1.0, 0.0, "a", "/v1/chat/completions", True, workload=workload))
    h.append(Complete(1.0 + seconds, 0.0, "a", outcome, 200 if outcome is Outcome.OK else 400, "", "r", 8, 2))
    return h


def test_a_request_ending_on_its_bound_ended_within_it():
    check = v.every_request_terminal(within_s=2.0)
    assert check(_latency(2.0)).status is v.Status.PASS
    assert check(_latency(2.0 + HAIR)).status is v.Status.FAIL


def test_a_failure_ending_on_its_bound_was_clean_in_time():
    check = v.failed_requests_are_clean(within_s=2.0, since=v.Since.FAULT)
    for took, want in ((2.0, v.Status.PASS), (2.0 + HAIR, v.Status.FAIL)):
        h = History()
        fault(h, 0.5, 9.0)
        op(h, "a", 1.0, 1.0 + took, Outcome.CLEAN_ERROR, error="500")
        assert check(h).status is want, took


def test_an_unservable_request_refused_on_its_bound_was_turned_away():
    check = v.unservable_turned_away(within_s=2.0, workload="long#1")
    assert check(_latency(2.0, Outcome.CLEAN_ERROR, "long#1")).status is v.Status.PASS
    assert check(_latency(2.0 + HAIR, Outcome.CLEAN_ERROR, "long#1")).status is v.Status.FAIL


def test_a_first_success_on_the_bound_after_the_heal_is_recovery():
    for check in (v.recovers(within_s=2.0), v.recovers_after_each_heal(within_s=2.0)):
        for took, want in ((2.0, v.Status.PASS), (2.0 + HAIR, v.Status.FAIL)):
            h = History()
            fault(h, 0.5, 1.0)
            op(h, "a", 1.0, 1.0 + took)  # sent at the heal itself
            assert check(h).status is want, (check.name, took)


def test_a_service_ready_at_the_heal_itself_starts_the_clock_there():
    h = History()
    fault(h, 0.5, 1.0)
    series(h, HEALTH, "decode", [(0.75, 0.0), (1.0, 1.0)])
    op(h, "a", 1.0, 3.0)
    found = v.recovers(within_s=2.0, ready=["decode"])(h)
    assert found.status is v.Status.PASS and found.evidence.values["ready_after_heal_s"] == 0.0


def test_a_watchdog_firing_on_either_edge_of_its_window_fired_in_time():
    counter = Metric("prefill", "num_bootstrap_failed_reqs_total")
    check = v.watchdog_fired("bootstrap", counter, timeout_s=2.0, slack_s=1.0)
    lo, hi = 1.0 + 2.0 - SAMPLE_TOLERANCE_S, 1.0 + 2.0 + 1.0
    for rise, want in (
        (lo, v.Status.PASS),
        (hi, v.Status.PASS),
        (lo - HAIR, v.Status.FAIL),
        (hi + HAIR, v.Status.FAIL),
    ):
        h = History()
        fault(h, 1.0, 9.0)
        series(h, "prefill", counter.name, [(0.5, 0.0), (rise - HAIR, 0.0), (rise, 1.0), (hi + 1.0, 1.0)])
        assert check(h).status is want, rise


def test_a_gauge_back_on_the_window_s_last_instant_did_not_leak():
    check = v.no_leak(gauges=[("decode", "num_running_reqs")], within_s=2.0)
    for back, want in ((2.0, v.Status.PASS), (2.0 + HAIR, v.Status.FAIL)):
        h = History()
        fault(h, 1.0, 3.0)
        series(h, "decode", "num_running_reqs", [(0.5, 0.0), (1.0, 4.0), (3.0, 4.0), (3.0 + back, 0.0), (9.0, 0.0)])
        assert check(h).status is want, back


def test_a_sample_at_the_fault_itself_is_not_the_baseline():
    """The baseline is the quietest moment before the fault: a reading taken at the fault's
    own instant already shows it."""
    h = History()
    fault(h, 1.0, 3.0)
    series(h, "decode", "num_running_reqs", [(0.5, 2.0), (1.0, 0.0), (2.0, 3.0), (3.0, 2.0), (9.0, 2.0)])
    found = v.no_leak(gauges=[("decode", "num_running_reqs")], within_s=2.0)(h)
    assert (
        found.status is v.Status.PASS and found.evidence.values["gauges"]["decode:num_running_reqs"]["baseline"] == 2.0
    )


def test_nothing_held_puts_no_heartbeat_at_stake():
    h = History()
    fault(h, 1.0, 9.0)
    h.append(TriggerFired(8.0, f"{HEAL_ONCE} {PREFILL_LOST}", "seen"))
    assert v.decode_gives_prefill_up(held=0)(h).status is v.Status.NOT_AT_STAKE


def test_an_empty_reply_that_claims_no_tokens_agrees_with_its_status():
    h = History()
    h.append(Invoke(1.0, 0.0, "a", "/v1/chat/completions", True))
    h.append(Complete(2.0, 0.0, "a", Outcome.OK, 200, "", "", 8, 0))
    assert v.status_agrees_with_body()(h).status is v.Status.PASS
