"""Clients hang up: one at a time, and all at once (an abort storm).

Bug class: aborts that leave a request's queue entry and KV behind (SGLang's pause/resume
leak test, #12293); an abort storm that wedged a cluster (sglang PR #28651). Fault model:
the clients themselves close streams mid-way, and non-stream requests before any reply.
Verdicts: every engine queue, running count and router in-flight gauge returns to its
baseline; the stack serves again.
"""

from __future__ import annotations

import pytest

from chaos import verdicts as v
from chaos.workloads import Deadlines
from suites.conftest import ENGINE_QUEUES, ROUTER_INFLIGHT, aftermath

pytestmark = [pytest.mark.fault("client")]

GAUGES = ENGINE_QUEUES + ROUTER_INFLIGHT + [("decode", "num_used_tokens"), ("prefill", "num_used_tokens")]


def test_abort_storm_mid_stream(stack, history, sampler, workload, faults, bounds):
    with faults.by_clients("abort storm: 16 streams hung up after 2 events"):
        workload.abort_storm(16, after_events=2)
    v.expect(history, *aftermath(workload, sampler, bounds, gauges=GAUGES, within_s=bounds.slack_s + 2))


def test_clients_give_up_before_the_reply(stack, history, sampler, workload, faults, bounds):
    body = workload.chat("word " * 800, max_tokens=50)
    impatient = Deadlines(read_s=0.3, total_s=1.0)
    with faults.by_clients("8 non-stream requests abandoned after 0.3 s"):
        for i in range(8):
            workload.request("/v1/chat/completions", {**body, "messages": [{"role": "user", "content": f"{i} " + "word " * 800}]}, deadlines=impatient)
    v.expect(history, *aftermath(workload, sampler, bounds, gauges=GAUGES, within_s=bounds.slack_s + 2))
