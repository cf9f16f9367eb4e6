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
from chaos.triggers import gauge
from chaos.workloads import Deadlines

pytestmark = [pytest.mark.fault("network")]


@pytest.mark.needs("proxied_control")
def test_lone_request_with_a_stalled_handshake(stack, history, sampler, workload, faults, bounds):
    lone = Deadlines(read_s=bounds.waiting_s + 3 * bounds.slack_s, stall_s=bounds.waiting_s + 2 * bounds.slack_s, total_s=bounds.waiting_s + 3 * bounds.slack_s)
    with faults.blackhole("control", stream="upstream"):
        workload.request("/v1/chat/completions", workload.chat("alone", max_tokens=4, stream=True), deadlines=lone)
    v.expect(
        history,
        v.every_request_terminal(within_s=lone.total_s),
        v.failed_requests_are_clean(),
        v.watchdog_fired("prefill bootstrap", source="prefill", counter="num_bootstrap_failed_reqs_total", timeout_s=bounds.bootstrap_s, slack_s=bounds.slack_s),
    )


@pytest.mark.needs("process_control", "inflight_watchdog")
def test_lone_transfer_to_a_frozen_decode(stack, history, sampler, workload, faults, bounds):
    import threading

    body = workload.chat("word " * 1500, max_tokens=4)  # 1.5 s forward
    lone = Deadlines(read_s=bounds.inflight_s + bounds.forward_s + 2 * bounds.slack_s, total_s=bounds.inflight_s + bounds.forward_s + 2 * bounds.slack_s)
    th = threading.Thread(target=workload.request, args=("/v1/chat/completions", body), kwargs={"deadlines": lone})
    th.start()
    try:
        with faults.freeze("decode", when=gauge("decode", "num_decode_transfer_queue_reqs") > 0, deadline_s=5):
            sampler.wait_quiet([("prefill", "num_prefill_inflight_queue_reqs"), ("prefill", "num_running_reqs")], within_s=bounds.inflight_s + bounds.forward_s + bounds.slack_s + 1)
    finally:
        th.join(timeout=lone.total_s + 5)
    v.expect(
        history,
        v.watchdog_fired("prefill inflight", source="prefill", counter="num_transfer_failed_reqs_total", timeout_s=bounds.inflight_s, slack_s=bounds.forward_s + bounds.slack_s),
        v.every_request_terminal(within_s=lone.total_s + 1),
    )
