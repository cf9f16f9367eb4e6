"""Agents in multi-round, growing-context conversations over keep-alive connections.

Bug class: the incident behind pd-chaos (an agent harness hung after a few rounds, behind a
misbehaving proxy, with no client timeouts), silent context loss in long conversations,
and replies mixed up between conversations. Fault model: none (the control), a proxy
reset between rounds, and latency on the client link during rounds. Verdicts: every round
ends within its deadline, prompts grow every round, replies equal the fault-free baseline's
and their finish reasons agree with their token counts, and agents finish after recovery.
"""

from __future__ import annotations

import pytest

from chaos import verdicts as v
from chaos.clients.client import Deadlines
from chaos.observe.records import Outcome, Phase
from chaos.observe.triggers import requests_done

pytestmark = [pytest.mark.fault("network")]

TALK = dict(agents=4, rounds=5, words_per_round=60, max_tokens=12)


def _deadlines(bounds) -> Deadlines:
    return Deadlines(read_s=bounds.slack_s * 4, stall_s=bounds.slack_s * 2, total_s=bounds.slack_s * 6)


def _talk_holds(bounds, *, failures: set[Outcome]) -> list[v.Check]:
    """What every conversation here must show: rounds end in time, only the allowed
    failures, prompts growing every round, replies equal to the baseline's, each finish
    reason agreeing with its token count (a round's reply cut short and called finished is
    the incident's silent failure)."""
    return [
        v.every_request_terminal(within_s=_deadlines(bounds).ends_within_s),
        v.outcomes_in(failures),
        v.context_grows(),
        v.replies_match_baseline(),
        v.finish_reasons_tell_the_truth(),
    ]


def test_clean_conversations(scenario, workload, bounds):
    scenario.baseline(**TALK)
    scenario.judge(*_talk_holds(bounds, failures=set()))
    workload.conversations(**TALK, deadlines=_deadlines(bounds), phase=Phase.AFTER).run()


@pytest.mark.needs("proxied_client")
def test_keepalive_connections_reset_between_rounds(scenario, history, workload, faults, bounds):
    """Toxiproxy drops every open connection (proxy down, then up) while agents are between
    rounds; their next round must go out on a fresh connection and succeed."""
    scenario.baseline(**TALK)
    scenario.judge(
        *_talk_holds(bounds, failures={Outcome.CONNECTION_ERROR, Outcome.TRUNCATED}),
        v.recovers(within_s=bounds.recovery_s),
    )
    retry_cut = frozenset({Outcome.CLEAN_ERROR, Outcome.CONNECTION_ERROR, Outcome.TRUNCATED})
    convo = workload.conversations(**TALK, deadlines=_deadlines(bounds), retries=6, retry_on=retry_cut).start()
    with faults.down("client_router", when=requests_done(history, 6, phase=Phase.FAULT)):
        pass  # every keep-alive connection is closed under the agents, mid-conversation
    convo.join()


@pytest.mark.needs("proxied_client")
def test_latency_during_rounds(scenario, workload, faults, bounds):
    scenario.baseline(**TALK)
    scenario.judge(*_talk_holds(bounds, failures=set()))
    with faults.latency("client_router", 300):
        workload.conversations(**TALK, deadlines=_deadlines(bounds)).run()
    workload.probe_until_ok(within_s=bounds.recovery_s)
