"""A lone stuck request with no other traffic: its watchdog must still fire.

Bug class: a watchdog that "never fired" because it ran only when new requests woke the
scheduler: with the deployment otherwise idle, a single stuck request waited forever.
Fault model: exactly one request, with its handshake blackholed (control link), or its KV
transfer unacknowledged (decode frozen); the rig sends nothing else until the verdict
window has closed (the sampler reads /metrics, which is not a request).
"""

from __future__ import annotations

import contextlib

import pytest

from chaos import verdicts as v
from chaos.clients.client import Deadlines
from chaos.observe.pipeline import DECODE_TRANSFER_QUEUE, PREFILL_BOOTSTRAP_FAILED, PREFILL_TRANSFER_FAILED, Metric
from chaos.observe.triggers import gauge, quiet
from chaos.targets.base import Capability

pytestmark = [pytest.mark.fault("network")]

PREFILL_HOLDS = (Metric("prefill", "num_prefill_inflight_queue_reqs"), Metric("prefill", "num_running_reqs"))
FROZEN_WITHIN_S = 5.0  # decode is frozen this long after the request at the latest, or the rig fails


@pytest.mark.needs("control_link")
def test_lone_request_with_a_stalled_handshake(scenario, workload, faults, bounds):
    lone = Deadlines(
        read_s=bounds.waiting_s + 3 * bounds.slack_s,
        stall_s=bounds.waiting_s + 2 * bounds.slack_s,
        total_s=bounds.waiting_s + 3 * bounds.slack_s,
    )
    scenario.judge(
        v.every_request_terminal(within_s=lone.total_s),
        v.failed_requests_are_clean(),
        v.watchdog_fired(
            "prefill bootstrap",
            PREFILL_BOOTSTRAP_FAILED,
            timeout_s=bounds.bootstrap_s,
            slack_s=bounds.slack_s,
            since=v.Since.REQUEST,
        ),
    )
    with faults.blackhole("control", stream="upstream"):
        workload.request("/v1/chat/completions", workload.chat("alone", max_tokens=4, stream=True), deadlines=lone)


FROZEN_DECODE_PINS = (
    "(mooncake_tcp) while its decode is frozen (alive, its sockets open, "
    "nothing read), prefill holds the room in its inflight queue until the request's client goes away; "
    "no engine timeout applies once the handshake is done (upstream has no inflight watchdog), so the "
    "only bounds are the client's deadline and smg's --request-timeout-secs (1800 s by default). "
    "Evidence: num_prefill_inflight_queue_reqs stays 1 for the whole freeze (28 s in a run held 60 s, "
    "freed 0.04 s after the client's 30 s deadline passed)"
)


@pytest.mark.smoke
@pytest.mark.needs("process_control")
@pytest.mark.known_issue(
    "no_leak",
    component="SGLang",
    version="0.5.23",
    behaviour=FROZEN_DECODE_PINS,
    evidence={"held": [f"{source}:{name}" for source, name in PREFILL_HOLDS]},
    lacking="inflight_watchdog",
)
def test_lone_transfer_to_a_frozen_decode(scenario, workload, faults, bounds):
    """Decode is frozen once it waits for the lone request's KV: alive, its sockets open,
    nothing read, so prefill's transfer never completes and nothing else wakes prefill. An
    engine with an inflight watchdog must free the room by it. What a user needs of any
    engine: prefill lets go of the room within the bound the pair itself sets on a transfer,
    decode's waiting timeout (decode gives up on that KV then; prefill holding it longer
    serves no one), or the watchdog's where there is one; the forward and the slack on top."""
    watchdog = scenario.has(Capability.INFLIGHT_WATCHDOG)
    released = (bounds.inflight_s if watchdog else bounds.waiting_s) + bounds.forward_s + bounds.slack_s
    # the client stays until the window has closed however late the freeze came: its going
    # away frees the room on an engine without a watchdog, and must not pass for a release
    lone = Deadlines(
        read_s=FROZEN_WITHIN_S + released + bounds.slack_s, total_s=FROZEN_WITHIN_S + released + bounds.slack_s
    )
    scenario.judge(
        v.every_request_terminal(within_s=lone.ends_within_s),
        v.no_leak(gauges=PREFILL_HOLDS, within_s=released, since=v.Since.LAST_FAULT),
        *(
            [
                v.watchdog_fired(
                    "prefill inflight",
                    PREFILL_TRANSFER_FAILED,
                    timeout_s=bounds.inflight_s,
                    slack_s=bounds.forward_s + bounds.slack_s,
                )
            ]
            if watchdog
            else []
        ),
    )
    # Frozen inside the transfer: a real engine moves this KV in milliseconds, so the kv link
    # crawls (faults.transfer_window) until decode is frozen, then heals; the freeze comes
    # once both ends hold the room, decode waiting for its KV and prefill computing or
    # sending it (a room prefill has yet to take up would fail its handshake instead), and
    # stays until prefill let go (or the bound passed). Nothing else is sent.
    with contextlib.ExitStack() as frozen, faults.transfer_window():
        request = workload.background(
            [workload.chat("word " * 1500, max_tokens=4)], deadlines=lone
        )  # a 1.5 s forward on pdsim
        frozen.callback(request.join)
        frozen.enter_context(
            faults.freeze(
                "decode",
                when=(gauge(*DECODE_TRANSFER_QUEUE) > 0)
                & ((gauge(*PREFILL_HOLDS[0]) > 0) | (gauge(*PREFILL_HOLDS[1]) > 0)),
                deadline_s=FROZEN_WITHIN_S,
                until=quiet(PREFILL_HOLDS),
                hold_s=released + 1,
            )
        )
