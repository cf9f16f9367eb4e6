"""Verdicts: pure functions of the history, each returning a status and the evidence it
rests on (``chaos.judge``). This is the one name suites import (``from chaos import
verdicts as v``); each verdict lives in the judging module named for where its evidence
comes from.

A verdict never reads live state. Its status is pass, fail or unknown; no data is unknown,
never pass, and ``expect`` fails on anything but pass. A premise (``scenario.require``) is
met or unmet: unmet, the run tested nothing. Bounds are arguments, in seconds, taken by
scenarios from the target's configuration (``chaos.bounds``), not written into verdicts.

| module | verdicts |
|---|---|
| ``judge.requests`` | every_request_terminal, failed_requests_are_clean, outcomes_in |
| ``judge.statuses`` | statuses_in, refused_within, served_or_refused |
| ``judge.streams`` | stream_gaps_at_most |
| ``judge.conversations`` | conversations_finish, context_grows |
| ``judge.replies`` | replies_match_baseline |
| ``judge.counters`` | watchdog_fired, counter_never_rises |
| ``judge.gauges`` | no_leak |
| ``judge.recovery`` | recovers |
| ``judge.breakers`` | charged_only_where_struck |
| ``judge.health`` | health_tells_truth, not_ready_before_gone |
| ``judge.logs`` | amplification_at_most; premises requests_retried, prefix_reused |
| ``judge.soak`` | does_not_grow |
| ``judge.attribution`` | stuck_before_router |
| ``judge.premises`` | requests_affected, ended_as, open_at_fault, gauge_reached, queued_for |
"""

from __future__ import annotations

from chaos.judge.attribution import stuck_before_router
from chaos.judge.breakers import charged_only_where_struck
from chaos.judge.clock import Since
from chaos.judge.conversations import context_grows, conversations_finish
from chaos.judge.counters import counter_never_rises, watchdog_fired
from chaos.judge.declare import Check, Window, premise, verdict
from chaos.judge.gauges import no_leak
from chaos.judge.health import health_tells_truth, not_ready_before_gone
from chaos.judge.judging import evaluate, expect, record, require
from chaos.judge.known import KnownIssue, KnownIssueSeen, VerdictFailed, raise_unless_passed
from chaos.judge.logs import amplification_at_most, prefix_reused, receptions, requests_retried
from chaos.judge.model import Evidence, Finding, Role, Status, Verdict, failed, met, passed, unknown, unmet
from chaos.judge.premises import ended_as, gauge_reached, open_at_fault, queued_for, requests_affected
from chaos.judge.recovery import recovers
from chaos.judge.replies import replies_match_baseline
from chaos.judge.requests import every_request_terminal, failed_requests_are_clean, outcomes_in
from chaos.judge.soak import does_not_grow
from chaos.judge.statuses import refused_within, served_or_refused, statuses_in
from chaos.judge.streams import stream_gaps_at_most

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
    "amplification_at_most",
    "charged_only_where_struck",
    "context_grows",
    "conversations_finish",
    "counter_never_rises",
    "does_not_grow",
    "ended_as",
    "evaluate",
    "every_request_terminal",
    "expect",
    "failed",
    "failed_requests_are_clean",
    "gauge_reached",
    "health_tells_truth",
    "met",
    "no_leak",
    "not_ready_before_gone",
    "open_at_fault",
    "outcomes_in",
    "passed",
    "prefix_reused",
    "premise",
    "queued_for",
    "raise_unless_passed",
    "receptions",
    "record",
    "recovers",
    "refused_within",
    "replies_match_baseline",
    "requests_affected",
    "requests_retried",
    "require",
    "served_or_refused",
    "statuses_in",
    "stream_gaps_at_most",
    "stuck_before_router",
    "unknown",
    "unmet",
    "verdict",
    "watchdog_fired",
]
