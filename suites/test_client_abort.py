"""Clients hang up: one at a time, and all at once (an abort storm).

Bug class: aborts that leave a request's queue entry and KV behind (SGLang's pause/resume
leak test, #12293); an abort storm that wedged a cluster (sglang PR #28651). Fault model:
the clients themselves close streams mid-way, and non-stream requests before any reply.
Premise: every request was in flight when its client let go (it ended by the client's own
decision, not refused up front). Verdicts: every engine queue, running count, KV tokens in
use and router in-flight gauge returns to its baseline; the abort path freed each request,
not a backstop (no engine timeout released one); the stack serves again.
"""

from __future__ import annotations

import pytest

from chaos import verdicts as v
from chaos.observe.pipeline import ENGINE_QUEUES, KV_IN_USE, ROUTER_INFLIGHT
from chaos.observe.records import Outcome, Phase

pytestmark = [pytest.mark.fault("client")]

GAUGES = ENGINE_QUEUES + ROUTER_INFLIGHT + KV_IN_USE


@pytest.mark.smoke
def test_abort_storm_mid_stream(scenario, workload, faults, bounds):
    with faults.by_clients("abort storm: 16 streams hung up after 2 events"):
        workload.abort_storm(16, after_events=2)
    scenario.require(
        v.ended_as(Outcome.HUNG_UP, phase=Phase.FAULT, why="every stream was hung up by its client mid-way")
    )
    scenario.judge(v.backstops_stay_idle(phase=Phase.FAULT))
    scenario.settle(GAUGES, within_s=bounds.abort_s)


def test_clients_give_up_before_the_reply(scenario, workload, faults, bounds):
    impatient = bounds.impatient(read_s=0.3, total_s=1.0)
    # 400 tokens each: no engine answers that within the 0.3 s its client waits (real SGLang on
    # CPU answered 50 in time once, and the premise rightly called the run void)
    bodies = [workload.chat(f"{i} " + "word " * 800, max_tokens=400, ignore_eos=True) for i in range(8)]
    with faults.by_clients("8 non-stream requests abandoned after 0.3 s"):
        workload.background(bodies, deadlines=impatient).join()
    scenario.require(
        v.ended_as(
            Outcome.CLIENT_TIMEOUT, phase=Phase.FAULT, why="every request was still unanswered when its client gave up"
        )
    )
    scenario.judge(v.backstops_stay_idle(phase=Phase.FAULT))
    scenario.settle(GAUGES, within_s=bounds.abandon_s)
