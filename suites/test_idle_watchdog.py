"""A lone stuck request with no other traffic: its watchdog must still fire.

Bug class: a watchdog that "never fired" because it ran only when new requests woke the
scheduler: with the deployment otherwise idle, a single stuck request waited forever.
Fault model: exactly one request, with its handshake blackholed (control link), or its KV
transfer unacknowledged (decode frozen); the rig sends nothing else until the verdict
window has closed (the sampler reads /metrics, which is not a request).
"""

from __future__ import annotations

import pytest

from chaos import verdicts as v
from chaos.client import Deadlines
from chaos.pipeline import DECODE_TRANSFER_QUEUE, PREFILL_BOOTSTRAP_FAILED, PREFILL_TRANSFER_FAILED, Metric
from chaos.triggers import gauge, quiet

pytestmark = [pytest.mark.fault("network")]

PREFILL_HOLDS = (Metric("prefill", "num_prefill_inflight_queue_reqs"), Metric("prefill", "num_running_reqs"))


@pytest.mark.needs("control_link")
def test_lone_request_with_a_stalled_handshake(scenario, workload, faults, bounds):
    lone = Deadlines(read_s=bounds.waiting_s + 3 * bounds.slack_s, stall_s=bounds.waiting_s + 2 * bounds.slack_s, total_s=bounds.waiting_s + 3 * bounds.slack_s)
    scenario.judge(
        v.every_request_terminal(within_s=lone.total_s),
        v.failed_requests_are_clean(),
        v.watchdog_fired("prefill bootstrap", PREFILL_BOOTSTRAP_FAILED, timeout_s=bounds.bootstrap_s, slack_s=bounds.slack_s, since=v.Since.REQUEST),
    )
    with faults.blackhole("control", stream="upstream"):
        workload.request("/v1/chat/completions", workload.chat("alone", max_tokens=4, stream=True), deadlines=lone)


@pytest.mark.smoke
@pytest.mark.needs("process_control", "inflight_watchdog")
def test_lone_transfer_to_a_frozen_decode(scenario, workload, faults, bounds):
    pinned = bounds.inflight_s + bounds.forward_s + bounds.slack_s  # the watchdog's bound, forward included
    lone = Deadlines(read_s=pinned + bounds.slack_s, total_s=pinned + bounds.slack_s)
    scenario.judge(
        v.watchdog_fired("prefill inflight", PREFILL_TRANSFER_FAILED, timeout_s=bounds.inflight_s, slack_s=bounds.forward_s + bounds.slack_s),
        v.every_request_terminal(within_s=lone.ends_within_s),
    )
    request = workload.background([workload.chat("word " * 1500, max_tokens=4)], deadlines=lone)  # a 1.5 s forward
    try:
        with faults.freeze("decode", when=gauge(*DECODE_TRANSFER_QUEUE) > 0, deadline_s=5, until=quiet(PREFILL_HOLDS), hold_s=pinned + 1):
            pass  # decode stays frozen until prefill let go (or the bound passed): nothing else is sent
    finally:
        request.join()
