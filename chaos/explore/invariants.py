"""The universal invariants: what must hold whatever an episode's schedule did. Each is a
verdict of the judging package, declared before the episode acts, judged once it ends."""

from __future__ import annotations

from chaos import verdicts as v
from chaos.clients.client import Deadlines
from chaos.faults.kinds import CUT_OUTCOMES
from chaos.observe.pipeline import (
    DECODE_TRANSFER_FAILED,
    ENGINE_QUEUES,
    KV_IN_USE,
    PREFILL_BOOTSTRAP_FAILED,
    PREFILL_TRANSFER_FAILED,
    ROUTER_INFLIGHT,
    on_engines,
)
from chaos.observe.records import Phase
from chaos.run.bounds import Bounds
from chaos.run.scenario import Scenario
from chaos.targets.base import Capability

__all__ = ["CUT_BY", "FAILURE_COUNTERS", "QUIET", "deadlines", "judge_universal", "quiet_universal", "settle_universal"]

# What must be back at its baseline once the stack is quiet: the engines' queues, the KV
# tokens they hold for requests, the router's in-flight requests
QUIET = ENGINE_QUEUES + KV_IN_USE + ROUTER_INFLIGHT
# The engines' timeouts' failure counters: only a fault can give a timeout cause to fire (a
# client's hang-up aborts a transfer, and SGLang counts that a transfer failure too)
FAILURE_COUNTERS = (PREFILL_BOOTSTRAP_FAILED, PREFILL_TRANSFER_FAILED, DECODE_TRANSFER_FAILED)

# How a request may end where a fault cuts the client's hop: declared with the faults' kinds
CUT_BY = CUT_OUTCOMES


def deadlines(bounds: Bounds) -> Deadlines:
    """Every episode's clients: patient until decode's waiting timeout and two slacks have
    acted on a stuck stream, so that the system, not the client, ends what a fault stalls."""
    return bounds.past_timeout(bounds.waiting_s, slacks=2)


def judge_universal(
    scenario: Scenario,
    d: Deadlines,
    *,
    baseline: bool,
    conversations: bool,
    cut: str | tuple[str, ...] = (),
    decodes_ended: tuple[str, ...] = (),
    drained: bool = False,
    primary_only: bool = False,
    every_heal: bool = False,
    held: int = 0,
    held_miss_s: float = 0.0,
) -> None:
    """Every request ends within its client's deadline, with a status its body agrees with and
    that tells whose failure it was (``statuses_tell_the_truth``);
    every failure is clean (while a fault ``cut`` the client's hop or froze decode, every
    failure during it ends as one of ``CUT_BY[c]`` for each ``c`` in ``cut`` allows, each
    unclean one open while a fault was, a truncated one begun before it ended);
    with a baseline (so that some replies succeed), every successful reply equals its
    context's fault-free reply and says truthfully why it ended; with multi-round
    conversations, no turn is dropped; where decode is killed, restarted or aborts everything
    it holds (each of ``decodes_ended``), no stream it was serving goes on to succeed
    (``no_hidden_fault``); where a service was sent SIGTERM (``drained``), every stream open
    then finishes (``sigterm_drains``); where only primary paths acted
    (``primary_only``: the clients' own hang-ups, engines' aborts, a KV link refusing or
    resetting; ``chaos.explore.schedule.primary_path``), no backstop released a request
    (``backstops_stay_idle``); where faults follow one another (``every_heal``), service
    came back after each, within the target's recovery bound (``settle`` judges the last);
    where faults cut decode from prefill and were ``held`` until decode gave it up, its
    heartbeat did so within its bound in each (``decode_gives_prefill_up``), and no sooner
    than its misses allow, each taking ``held_miss_s`` to fail (``Bounds.heartbeat_no_sooner_s``)."""
    checks = [
        v.every_request_terminal(within_s=d.ends_within_s),
        v.status_agrees_with_body(),
        v.statuses_tell_the_truth(),
    ]
    cut = (cut,) if isinstance(cut, str) else cut
    if not cut:
        checks.append(v.failed_requests_are_clean())
    else:
        checks += [
            v.failed_requests_are_clean(phase=Phase.BASELINE),
            v.outcomes_in(set().union(*(CUT_BY[c] for c in cut)), phase=Phase.FAULT, explained=True),
            v.failed_requests_are_clean(phase=Phase.AFTER),
        ]
    if baseline:
        checks += [v.replies_match_baseline(), v.finish_reasons_tell_the_truth()]
    if conversations:
        checks.append(v.context_grows())
    checks += [v.no_hidden_fault(service=decode) for decode in decodes_ended]
    if drained:
        checks.append(v.sigterm_drains())
    if primary_only:
        checks.append(v.backstops_stay_idle())
    if held:
        no_sooner_s = scenario.bounds.heartbeat_no_sooner_s(held_miss_s)
        checks.append(v.decode_gives_prefill_up(held=held, no_sooner_s=no_sooner_s))
    if every_heal:
        checks.append(v.recovers_after_each_heal(within_s=scenario.bounds.recovery_s))
    scenario.judge(*checks, by="universal")


def settle_universal(scenario: Scenario, bounds: Bounds, *, decode_ended: bool = False) -> None:
    """After the faults healed: service recovers, nothing leaks (``QUIET``, on every engine of
    the stack's topology), and smg charged failures only where a fault struck. Where a strike
    ended a decode (``decode_ended``), prefill
    may be forwarding rooms whose decode is gone and ship their KV to the decode that replaced
    it, which never heard of them: the incident's pinned rooms. An engine with an inflight
    watchdog frees them by it, so their leak window is the watchdog's bound (CI at 98a141e:
    explore's episode 2 of seed 1 held two such rooms past the 2.5 s window, freed by the
    watchdog 10 s after they entered the inflight queue; 0 of 5 reruns met the race)."""
    within_s = bounds.quiet_s
    if decode_ended and scenario.has(Capability.INFLIGHT_WATCHDOG):
        within_s = max(within_s, bounds.inflight_s + bounds.forward_s + bounds.slack_s)
    scenario.settle(on_engines(QUIET, scenario.target.info.topology.engines), within_s=within_s)


def quiet_universal(scenario: Scenario, bounds: Bounds) -> None:
    """After load alone (no fault, no client hanging up): no engine timeout fired
    (``FAILURE_COUNTERS`` flat: queueing is not stuck), and what ``settle_universal``
    judges: service, nothing leaked, and smg charged no worker (a refused request is the
    client's error)."""
    scenario.judge(*(v.counter_never_rises(c, why="load alone") for c in FAILURE_COUNTERS), by="universal")
    settle_universal(scenario, bounds)
