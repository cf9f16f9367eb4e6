"""The universal invariants: what must hold whatever an episode's schedule did. Each is a
verdict of the judging package, declared before the episode acts, judged once it ends."""

from __future__ import annotations

from chaos import verdicts as v
from chaos.bounds import Bounds
from chaos.client import Deadlines
from chaos.pipeline import ENGINE_QUEUES, ROUTER_INFLIGHT
from chaos.scenario import Scenario

__all__ = ["deadlines", "judge_universal", "settle_universal"]


def deadlines(bounds: Bounds) -> Deadlines:
    """Every episode's clients: patient until decode's waiting timeout and two slacks have
    acted on a stuck stream, so that the system, not the client, ends what a fault stalls."""
    return bounds.past_timeout(bounds.waiting_s, slacks=2)


def judge_universal(scenario: Scenario, d: Deadlines, *, baseline: bool, conversations: bool) -> None:
    """Every request ends within its client's deadline; every failure is clean; with a
    baseline, every successful reply equals its context's fault-free reply; with
    multi-round conversations, no turn is dropped."""
    checks = [v.every_request_terminal(within_s=d.ends_within_s), v.failed_requests_are_clean()]
    if baseline:
        checks.append(v.replies_match_baseline())
    if conversations:
        checks.append(v.context_grows())
    scenario.judge(*checks)


def settle_universal(scenario: Scenario, bounds: Bounds) -> None:
    """After the faults healed: service recovers, nothing leaks in the engines' queues or
    the router's in-flight gauges, and smg charged failures only where a fault struck."""
    scenario.settle(ENGINE_QUEUES + ROUTER_INFLIGHT, within_s=bounds.quiet_s)
