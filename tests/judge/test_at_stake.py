"""Every check can fail: no verdict passes where nothing was at stake.

Each public verdict (``chaos.verdicts``) and each suite's own is judged, with minimal
parameters, on an empty history and on a history where every request succeeded and no
fault struck. On the empty one none may pass. On the quiet one a verdict passes only if
those successful requests were what it judges (``AT_STAKE_ON_SUCCESS``): one that judges a
fault's effect, a failure's timing, a refusal or a held fault has nothing there and must say
so. A pass always names its stake in its evidence. A verdict added without a row here fails
``test_every_verdict_has_a_row``.
"""

from __future__ import annotations

from typing import Callable

import pytest

from chaos import verdicts as v
from chaos.judge.declare import DECLARED
from chaos.observe.growth import Limit
from chaos.observe.history import History
from chaos.observe.pipeline import CIRCUIT_FAILURES, Metric
from chaos.observe.records import Chunk, Complete, Invoke, LogEvent, Outcome, Phase, Sample
from chaos.observe.sampler import HEALTH
from suites.test_circuit_breaker import statuses_in
from suites.test_decode_radix_cache import conversations_finish
from suites.test_hostile_input import decode_legs_own_replies
from suites.test_idle_burst import first_bytes_as_fast_after_idle
from suites.test_mismatched_engines import refused_naming_the_mismatch
from suites.test_neighbour_stall import stream_gaps_at_most
from suites.test_overload import refused_within, served_or_refused
from suites.test_proxy_wedge import stuck_before_router
from suites.test_reply_endings import Ending, replies_end_where_asked
from suites.test_retry_amplification import amplification_at_most
from suites.test_soak import does_not_grow

WORKERS = {"prefill": "http://p", "decode": "http://d"}
FAILS = Metric("prefill", "num_bootstrap_failed_reqs_total")
RUNNING = Metric("decode", "num_running_reqs")

# Each verdict with minimal parameters, by the name the row shows.
ROWS: dict[str, Callable[[], v.Check]] = {
    "every_request_terminal": lambda: v.every_request_terminal(within_s=5),
    "failed_requests_are_clean": lambda: v.failed_requests_are_clean(),
    "failed_requests_are_clean(within_s)": lambda: v.failed_requests_are_clean(within_s=3),
    "outcomes_in": lambda: v.outcomes_in(set()),
    "status_agrees_with_body": lambda: v.status_agrees_with_body(),
    "statuses_tell_the_truth": lambda: v.statuses_tell_the_truth(),
    "client_errors_refused": lambda: v.client_errors_refused(within_s=3),
    "valid_requests_served": lambda: v.valid_requests_served(),
    "stayed_up": lambda: v.stayed_up(("prefill", "decode")),
    "no_hidden_fault": lambda: v.no_hidden_fault(),
    "sigterm_drains": lambda: v.sigterm_drains(),
    "unservable_turned_away": lambda: v.unservable_turned_away(within_s=3, workload="unservable#1"),
    "context_grows": lambda: v.context_grows(),
    "replies_match_baseline": lambda: v.replies_match_baseline(),
    "never_served_wrong": lambda: v.never_served_wrong(phase=Phase.AFTER),
    "finish_reasons_tell_the_truth": lambda: v.finish_reasons_tell_the_truth(),
    "watchdog_fired": lambda: v.watchdog_fired("bootstrap", FAILS, timeout_s=1, slack_s=1),
    "counter_never_rises": lambda: v.counter_never_rises(FAILS),
    "no_leak": lambda: v.no_leak(gauges=[RUNNING], within_s=1),
    "no_leak(no gauge)": lambda: v.no_leak(gauges=[], within_s=1),
    "sources_agree": lambda: v.sources_agree(),
    "recovers": lambda: v.recovers(within_s=5),
    "recovers_after_each_heal": lambda: v.recovers_after_each_heal(within_s=5),
    "charged_only_where_struck": lambda: v.charged_only_where_struck(WORKERS),
    "charged_only_where_struck(no worker)": lambda: v.charged_only_where_struck({}),
    "health_tells_truth": lambda: v.health_tells_truth("decode", phase=Phase.AFTER),
    "not_ready_before_gone": lambda: v.not_ready_before_gone("decode"),
    "backstops_stay_idle": lambda: v.backstops_stay_idle(),
    "failures_reach_the_client": lambda: v.failures_reach_the_client(),
    "decode_gives_prefill_up": lambda: v.decode_gives_prefill_up(held=0),
    "decode_gives_prefill_up(held)": lambda: v.decode_gives_prefill_up(held=1),
    "stuck_before_router": lambda: stuck_before_router(),
    "stream_gaps_at_most": lambda: stream_gaps_at_most(1.0, phase=Phase.AFTER, why="test"),
    "does_not_grow": lambda: does_not_grow([Limit(RUNNING, 0)]),
    "statuses_in": lambda: statuses_in(range(200, 300), phase=Phase.AFTER, why="test"),
    "served_or_refused": lambda: served_or_refused(429, phase=Phase.AFTER),
    "refused_within": lambda: refused_within(429, 3.0, phase=Phase.AFTER),
    "amplification_at_most": lambda: amplification_at_most(5, phase=Phase.AFTER),
    "conversations_finish": lambda: conversations_finish(2, phase=Phase.AFTER),
    "replies_end_where_asked": lambda: replies_end_where_asked([Ending("a", "f", "o", "x")], phase=Phase.AFTER),
    "decode_legs_own_replies": lambda: decode_legs_own_replies(),
    "first_bytes_as_fast_after_idle": lambda: first_bytes_as_fast_after_idle(1.0, reference_round=1),
    "refused_naming_the_mismatch": lambda: refused_naming_the_mismatch(1.0, phase=Phase.AFTER, words=("page",)),
    "healthy_workers_unaffected": lambda: v.healthy_workers_unaffected(struck="decode2"),
    "routed_around": lambda: v.routed_around(struck="decode2", within_s=1.0),
    "taken_back": lambda: v.taken_back(struck="decode2", within_s=1.0),
}

# What every successful request puts at stake: the verdicts that judge those requests, or
# what they could have done to a counter, a worker's breaker, a health probe or a log. The
# rest judge a fault's effect, a failure, a refusal or growth across checkpoints.
AT_STAKE_ON_SUCCESS = frozenset(
    {
        "every_request_terminal",
        "failed_requests_are_clean",
        "outcomes_in",
        "status_agrees_with_body",
        "context_grows",
        "replies_match_baseline",
        "never_served_wrong",
        "finish_reasons_tell_the_truth",
        "counter_never_rises",
        "charged_only_where_struck",
        "health_tells_truth",
        "backstops_stay_idle",
        "stream_gaps_at_most",
        "statuses_in",
        "served_or_refused",
        "valid_requests_served",
        "amplification_at_most",
        "conversations_finish",
    }
)


def _quiet() -> History:
    """Two agents' two-round conversations in the baseline and again after, each reply equal
    to its baseline, streamed; samples of every source all along; logs of each request;
    no fault."""
    h = History()
    t = 0.0
    for phase in (Phase.BASELINE, Phase.AFTER):
        for agent in ("agent0", "agent1"):
            for rnd in (0, 1):
                op = f"{phase.value}-{agent}-{rnd}"
                context = f"{agent}:{rnd}"
                h.append(
                    Invoke(
                        t, 0.0, op, "/v1/chat/completions", True, agent, rnd, context, phase, "talk#1", 8, True, False
                    )
                )
                h.append(Chunk(t + 0.1, op, 10))
                h.append(Chunk(t + 0.2, op, 10))
                h.append(
                    Complete(t + 0.3, 0.0, op, Outcome.OK, 200, "", f"reply {context}", 10 + rnd, 8, t + 0.1, "length")
                )
                h.append(LogEvent(t + 0.15, "prefill", f"rid={op}", op=op, fields={"rid": op, "state": "finished"}))
                t += 0.5
    for i in range(int(t * 10) + 2):
        at = i / 10
        h.append(Sample(at, "prefill", {FAILS.name: 0.0}))
        h.append(Sample(at, "decode", {RUNNING.name: 0.0}))
        h.append(Sample(at, HEALTH, {"decode": 1.0}))
        h.append(Sample(at, "router", {CIRCUIT_FAILURES.at(url).name: 0.0 for url in WORKERS.values()}))
    return h


def test_every_verdict_has_a_row():
    """A public verdict (or a suite's own, imported above) added without a row here would
    escape these checks."""
    verdicts = {name: module for name, (role, module) in DECLARED.items() if role is v.Role.VERDICT}
    public = {name for name in v.__all__ if name in verdicts}
    assert len(public) >= 20, public  # the declared verdicts were found at all
    suites_own = {"stuck_before_router", "stream_gaps_at_most", "does_not_grow", "statuses_in"}
    suites_own |= {"served_or_refused", "refused_within", "amplification_at_most", "conversations_finish"}
    suites_own |= {"replies_end_where_asked", "decode_legs_own_replies", "first_bytes_as_fast_after_idle"}
    suites_own |= {"refused_naming_the_mismatch"}
    rows = {name.split("(")[0] for name in ROWS}
    assert public <= rows, public - rows
    suites_declared = {name for name, module in verdicts.items() if module.startswith("suites.")}
    assert suites_declared <= rows, suites_declared - rows  # each suite's own, imported above
    assert suites_own <= rows
    assert all(ROWS[name]().role is v.Role.VERDICT for name in ROWS)


@pytest.mark.parametrize("name", sorted(ROWS))
def test_nothing_passes_on_an_empty_history(name):
    judged = ROWS[name]()(History())
    assert judged.status is not v.Status.PASS, judged


@pytest.mark.parametrize("name", sorted(ROWS))
def test_successes_alone_pass_only_what_they_put_at_stake(name):
    judged = ROWS[name]()(_quiet())
    if name in AT_STAKE_ON_SUCCESS:
        assert judged.status is v.Status.PASS, judged
        assert judged.evidence.values["at_stake"] > 0, judged
    else:
        assert judged.status is not v.Status.PASS, judged


def test_a_pass_with_no_stake_is_not_a_pass():
    assert v.passed("held", stake=0).status is v.Status.NOT_AT_STAKE
    assert v.passed("held", stake=3).evidence.values["at_stake"] == 3
    assert v.nothing_at_stake("no request").evidence.values["at_stake"] == 0


def test_the_tests_own_verdict_not_at_stake_fails_it_the_kits_does_not():
    def judged(by: str, status: v.Status) -> v.Verdict:
        return v.Verdict("outcomes_in", "outcomes_in", status, "m", by=by)

    with pytest.raises(v.VerdictFailed, match=r"\[NOT_AT_STAKE\] outcomes_in") as raised:
        v.raise_unless_passed([judged("test", v.Status.PASS), judged("test", v.Status.NOT_AT_STAKE)])
    assert not raised.value.failed  # not a failed verdict: the test tested nothing there
    v.raise_unless_passed([judged("test", v.Status.PASS), judged("settle", v.Status.NOT_AT_STAKE)])
    v.raise_unless_passed([judged("test", v.Status.PASS), judged("universal", v.Status.NOT_AT_STAKE)])
    with pytest.raises(v.VerdictFailed, match=r"\[UNKNOWN\]"):  # missing evidence is never excused
        v.raise_unless_passed([judged("test", v.Status.PASS), judged("settle", v.Status.UNKNOWN)])
