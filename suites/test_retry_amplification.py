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

from typing import Any

import pytest

from chaos import verdicts as v
from chaos.judge.declare import premise, verdict
from chaos.judge.logs import receptions
from chaos.judge.model import Finding, failed, met, nothing_at_stake, passed, unknown, unmet
from chaos.judge.ops import completed, none_completed
from chaos.observe.history import History
from chaos.observe.pipeline import ENGINE_QUEUES, ROUTER_INFLIGHT
from chaos.observe.records import Phase
from chaos.upstream import deferred_kv_release

pytestmark = [pytest.mark.fault("network"), pytest.mark.needs("kv_link")]

REQUESTS = 4


@verdict(lambda budget, phase, service, **_: f"amplification_at_most({budget}, {service}, {Phase(phase).value})")
def amplification_at_most(h: History, budget: int, *, phase: Phase, service: str = "prefill") -> Finding:
    """Each client request of ``phase`` reached ``service`` at most ``budget`` times (one
    try and the router's retries): one request, however it failed, must not become more
    executions than the retry budget allows (sglang PR #34570: a PD dispatch is not
    idempotent). The amplification factor, mean and worst, is in the message; the count is
    of the service's log lines joined to each request, so when none names any, unknown."""
    ops = completed(h, phase)
    if not ops:
        return nothing_at_stake(none_completed(phase))
    seen = receptions(h, service, (o.invoke.op for o in ops))
    counted = [n for n in seen.values() if n]
    if not counted:
        return unknown(f"no {service} log line names any of the {len(ops)} requests")
    mean = sum(counted) / len(counted)
    figures: dict[str, Any] = {
        "mean": round(mean, 3),
        "worst": max(counted),
        "requests": len(counted),
        "budget": budget,
    }
    factor = f"amplification {mean:.2f} mean, {max(counted)} worst over {len(counted)} requests (budget {budget})"
    over = sorted(((n, op) for op, n in seen.items() if n > budget), reverse=True)
    if over:
        shown = ", ".join(f"{op} x{n}" for n, op in over[:5])
        return failed(f"{factor}; over budget: {shown}", ops=[op for _, op in over], **figures)
    missing = len(ops) - len(counted)
    return passed(
        factor + (f"; {missing} never seen in {service}'s log" if missing else ""),
        stake=len(counted),
        unseen=missing,
        **figures,
    )


@premise(lambda phase, service, **_: f"requests_retried({service}, {Phase(phase).value})")
def requests_retried(h: History, *, phase: Phase, why: str, service: str = "prefill") -> Finding:
    """Premise: ``service`` received at least one request of ``phase`` more than once (the
    router retried it): otherwise the run tested no retry."""
    seen = receptions(h, service, (o.invoke.op for o in completed(h, phase)))
    again = [op for op, n in seen.items() if n > 1]
    if not again:
        return unmet(f"no request of {len(seen)} reached {service} twice ({why})", requests=len(seen))
    return met(f"{len(again)} of {len(seen)} reached {service} more than once", ops=again, retried=len(again))


@deferred_kv_release
def test_a_failing_request_reaches_prefill_at_most_the_retry_budget(scenario, workload, faults, bounds):
    d = bounds.patient()
    scenario.judge(
        amplification_at_most(bounds.router_max_retries, phase=Phase.FAULT),
        v.every_request_terminal(within_s=d.ends_within_s),
        v.failed_requests_are_clean(),
        v.backstops_stay_idle(phase=Phase.FAULT),  # each attempt refused by the link, never timed out
    )
    with faults.down("kv"):  # non-streaming: smg can retry a request whose answer has not begun
        workload.background([workload.chat(f"retry me {i}", max_tokens=8) for i in range(REQUESTS)], deadlines=d).join()
    scenario.require(requests_retried(phase=Phase.FAULT, why="smg retries a retryable 500"))
    scenario.settle(ENGINE_QUEUES + ROUTER_INFLIGHT, within_s=bounds.quiet_s)
