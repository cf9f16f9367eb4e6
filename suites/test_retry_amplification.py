"""When smg retries a PD request, one client request must not become more prefill
executions than the retry budget, and no abandoned attempt may stay behind.

Bug class: a PD dispatch is not idempotent: a router that replays it makes the engines run it
again, and an attempt it abandons can stay as an orphaned room in the pipeline (sglang PR
#34570; a bootstrap room reused across attempts, kthena #1423). Fault model: the KV link
down, so prefill cannot reach decode and every attempt fails at once with a retryable 500:
smg retries each client request until its budget is spent. Verdicts: prefill received each
client request at most ``router_max_retries`` times (smg 1.13 counts the first attempt among
them), counted from prefill's log joined by the request id the client sent, with the
amplification factor in the report; every failure reaches the client clean; every engine
queue, KV pool and smg's in-flight gauges are back to zero (no orphaned room); recovery.
"""

from __future__ import annotations

import pytest

from chaos import verdicts as v
from chaos.history import Phase
from chaos.pipeline import ENGINE_QUEUES, ROUTER_INFLIGHT

pytestmark = [pytest.mark.fault("network"), pytest.mark.needs("kv_link")]

REQUESTS = 4


def test_a_failing_request_reaches_prefill_at_most_the_retry_budget(scenario, workload, faults, bounds):
    d = bounds.patient()
    scenario.judge(
        v.amplification_at_most(bounds.router_max_retries, phase=Phase.FAULT),
        v.every_request_terminal(within_s=d.ends_within_s),
        v.failed_requests_are_clean(),
    )
    with faults.down("kv"):  # non-streaming: smg can retry a request whose answer has not begun
        workload.background([workload.chat(f"retry me {i}", max_tokens=8) for i in range(REQUESTS)], deadlines=d).join()
    scenario.require(v.requests_retried(phase=Phase.FAULT, why="smg retries a retryable 500"))
    scenario.settle(ENGINE_QUEUES + ROUTER_INFLIGHT, within_s=bounds.quiet_s)
