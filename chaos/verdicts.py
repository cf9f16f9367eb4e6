"""Verdicts: pure functions of the history, each returning a status and the evidence it
rests on (``chaos.judge``). This is the one name suites import (``from chaos import
verdicts as v``); each verdict lives in the judging module named for where its evidence
comes from.

A verdict never reads live state. Its status is pass, fail, unknown or not at stake; no data
is unknown, never pass; a pass rests on a stake (what could have failed it), and with none
the verdict is not at stake. ``expect`` fails on anything but pass, save the kit's own
verdicts not at stake. A premise (``scenario.require``) is
met or unmet: unmet, the run tested nothing. Bounds are arguments, in seconds, taken by
scenarios from the target's configuration (``chaos.run.bounds``), not written into verdicts.

| module | verdicts |
|---|---|
| ``judge.requests`` | every_request_terminal, failed_requests_are_clean, outcomes_in, status_agrees_with_body, no_hidden_fault, sigterm_drains, unservable_turned_away, valid_requests_served |
| ``judge.conversations`` | context_grows |
| ``judge.replies`` | replies_match_baseline, never_served_wrong, finish_reasons_tell_the_truth |
| ``judge.counters`` | watchdog_fired, counter_never_rises |
| ``judge.gauges`` | no_leak, sources_agree |
| ``judge.recovery`` | recovers, recovers_after_each_heal |
| ``judge.breakers`` | charged_only_where_struck |
| ``judge.health`` | health_tells_truth, not_ready_before_gone |
| ``judge.processes`` | stayed_up |
| ``judge.statuses`` | statuses_tell_the_truth, client_errors_refused |
| ``judge.backstops`` | backstops_stay_idle |
| ``judge.heartbeat`` | decode_gives_prefill_up |
| ``judge.logs`` | (the log lines about each request, and how often an engine received it) |
| ``judge.attempts`` | failures_reach_the_client |
| ``judge.workers`` | healthy_workers_unaffected, routed_around, taken_back |
| ``judge.premises`` | requests_affected, ended_as, open_at_fault, fault_did, requests_slowed |

A verdict that one scenario alone uses lives next to it, as Jepsen's workloads keep their
checkers: ``stuck_before_router`` in ``suites/test_proxy_wedge.py``, ``stream_gaps_at_most``
in ``test_neighbour_stall.py``, ``does_not_grow`` in ``test_soak.py``, ``statuses_in`` in
``test_circuit_breaker.py``, ``served_or_refused``, ``refused_within`` and the premises
``gauge_reached``, ``queued_for`` in ``test_overload.py``, ``amplification_at_most`` and
``requests_retried`` in ``test_retry_amplification.py``, ``conversations_finish`` and
``prefix_reused`` in ``test_decode_radix_cache.py``.
"""

from __future__ import annotations

from chaos.judge.attempts import failures_reach_the_client
from chaos.judge.backstops import backstops_stay_idle
from chaos.judge.breakers import charged_only_where_struck
from chaos.judge.clock import Since
from chaos.judge.conversations import context_grows
from chaos.judge.counters import counter_never_rises, watchdog_fired
from chaos.judge.declare import Check, Window, premise, verdict
from chaos.judge.gauges import no_leak, sources_agree
from chaos.judge.health import health_tells_truth, not_ready_before_gone
from chaos.judge.heartbeat import decode_gives_prefill_up
from chaos.judge.judging import evaluate, expect, record, require
from chaos.judge.known import KnownIssue, KnownIssueSeen, VerdictFailed, raise_unless_passed
from chaos.judge.logs import receptions
from chaos.judge.model import (
    Evidence,
    Finding,
    Role,
    Status,
    Verdict,
    failed,
    met,
    nothing_at_stake,
    passed,
    unknown,
    unmet,
)
from chaos.judge.premises import ended_as, fault_did, open_at_fault, requests_affected, requests_slowed
from chaos.judge.processes import stayed_up
from chaos.judge.recovery import recovers, recovers_after_each_heal
from chaos.judge.replies import finish_reasons_tell_the_truth, never_served_wrong, replies_match_baseline
from chaos.judge.requests import (
    every_request_terminal,
    failed_requests_are_clean,
    no_hidden_fault,
    outcomes_in,
    sigterm_drains,
    status_agrees_with_body,
    unservable_turned_away,
    valid_requests_served,
)
from chaos.judge.statuses import client_errors_refused, statuses_tell_the_truth
from chaos.judge.workers import healthy_workers_unaffected, routed_around, taken_back

__all__ = [
    "Check",
    "Evidence",
    "Finding",
    "KnownIssue",
    "KnownIssueSeen",
    "Role",
    "Since",
    "Status",
    "Verdict",
    "VerdictFailed",
    "Window",
    "backstops_stay_idle",
    "charged_only_where_struck",
    "client_errors_refused",
    "context_grows",
    "counter_never_rises",
    "decode_gives_prefill_up",
    "ended_as",
    "evaluate",
    "every_request_terminal",
    "expect",
    "failed",
    "failed_requests_are_clean",
    "failures_reach_the_client",
    "fault_did",
    "finish_reasons_tell_the_truth",
    "health_tells_truth",
    "healthy_workers_unaffected",
    "met",
    "never_served_wrong",
    "no_hidden_fault",
    "no_leak",
    "not_ready_before_gone",
    "nothing_at_stake",
    "open_at_fault",
    "outcomes_in",
    "passed",
    "premise",
    "raise_unless_passed",
    "receptions",
    "record",
    "recovers",
    "recovers_after_each_heal",
    "replies_match_baseline",
    "requests_affected",
    "requests_slowed",
    "require",
    "routed_around",
    "sigterm_drains",
    "sources_agree",
    "status_agrees_with_body",
    "statuses_tell_the_truth",
    "stayed_up",
    "taken_back",
    "unknown",
    "unmet",
    "unservable_turned_away",
    "valid_requests_served",
    "verdict",
    "watchdog_fired",
]
