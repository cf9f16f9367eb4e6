"""Whatever the fault, what a client receives is well-formed, and a real client copes.

Bug class: streams that end with no final event, or with an error event a client cannot
parse, so that the client hangs, mis-reports, or crashes on a decode error instead of the
server's message (llm-d#2433; openai-python #2722; SSE error events, sglang-omni PR #425).
Fault models, each met by streams of the rig's client and of the official ``openai``
client: every request decode holds aborted through decode's own ``/abort_request``
(``abort_all``) mid-stream, the trigger being smg counting all of them at the decode worker
(SGLang ends such a stream gracefully, its last chunk saying ``abort``); and the KV link
blackholed, so that decode's waiting timeout fails them with a status (an error event).
Verdicts: every request ends within its deadline, every failure is a clean error (a status,
a last chunk saying ``abort``, or a parseable error event) for both clients, and service
recovers.
"""

from __future__ import annotations

import pytest

from chaos import verdicts as v
from chaos.observe.pipeline import ENGINE_QUEUES, ROUTER_INFLIGHT
from chaos.observe.records import Phase
from chaos.upstream import failed_kv_held_till_next_request

pytestmark = [pytest.mark.fault("engine")]

PER_CLIENT = 3
LONG_REPLY = 1000  # tokens: still streaming when the abort comes, on every target


def test_aborted_streams_end_well_formed_for_every_client(scenario, workload, faults, bounds):
    d = bounds.patient(stall_s=bounds.recovery_s)
    scenario.judge(
        v.every_request_terminal(within_s=d.ends_within_s),
        v.failed_requests_are_clean(phase=Phase.FAULT),
        v.backstops_stay_idle(phase=Phase.FAULT),  # decode's abort is the only path that acted
    )
    theirs = workload.openai_background([f"fable {i}" for i in range(PER_CLIENT)], max_tokens=LONG_REPLY, deadlines=d)
    ours = workload.background(
        [workload.chat(f"tale {i}", max_tokens=LONG_REPLY, ignore_eos=True, stream=True) for i in range(PER_CLIENT)],
        deadlines=d,
    )
    # smg's count at the decode worker is prompt on every engine (SGLang's own gauges lag)
    with faults.abort_all("decode", when=scenario.requests_at("decode") >= 2 * PER_CLIENT):
        ours.join()
        theirs.join()
    scenario.require(v.requests_affected(phase=Phase.FAULT, why="streams were decoding when decode aborted them"))
    scenario.settle(ENGINE_QUEUES + ROUTER_INFLIGHT, within_s=bounds.quiet_s)


@pytest.mark.needs("kv_link")
@failed_kv_held_till_next_request  # sglang-cpu 2026-12-06: one room's 19 tokens held until the probe
def test_streams_failed_by_a_timeout_end_well_formed_for_every_client(scenario, workload, faults, bounds):
    d = bounds.past_timeout(bounds.waiting_s, slacks=2)
    scenario.judge(v.every_request_terminal(within_s=d.ends_within_s), v.failed_requests_are_clean(phase=Phase.FAULT))
    with faults.blackhole("kv", stream="upstream"):  # no KV arrives: decode's waiting timeout fails each with a 500
        theirs = workload.openai_background([f"myth {i}" for i in range(PER_CLIENT)], max_tokens=8, deadlines=d)
        ours = workload.background(
            [workload.chat(f"saga {i}", max_tokens=8, stream=True) for i in range(PER_CLIENT)], deadlines=d
        )
        ours.join()
        theirs.join()
    scenario.require(v.requests_affected(phase=Phase.FAULT, why="decode's waiting timeout failed the streams"))
    scenario.settle(ENGINE_QUEUES + ROUTER_INFLIGHT, within_s=bounds.quiet_s)
