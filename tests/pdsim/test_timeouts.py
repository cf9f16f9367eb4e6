"""Each PD timeout fires at its configured value, with SGLang's status and message.

The session stack runs with the short test timeouts of ``chaos.targets.stack.Timeouts``
(bootstrap 3 s, waiting 6 s, inflight 10 s, heartbeat 2 s x 2); a watchdog must fire
within [timeout, timeout + SLACK_S] of the moment its clock started.
"""

from __future__ import annotations

import re
import time

import pytest

from tests.pdpair import background, decode_holds_a_room, gauge, proxy_down, send, toxic

SLACK_S = 1.0
BODY = {"text": "a lone request", "sampling_params": {"max_new_tokens": 4}}


@pytest.fixture
def t(stack):
    return stack.info.config["timeouts"]


def test_prefill_bootstrap_timeout_fires_with_sglang_message(stack, t):
    """Only the prefill leg arrives: decode never sends metadata. The engine is idle otherwise."""
    before = gauge(stack, "prefill", "num_bootstrap_failed_reqs_total")
    leg = send(stack, "/generate", {**BODY, "rid": "r-boot"}, legs=("prefill",), room=4242)["prefill"]
    assert leg.status == 500
    assert t["bootstrap_s"] <= leg.elapsed_s <= t["bootstrap_s"] + SLACK_S
    msg = leg.body["message"]
    assert re.fullmatch(
        r"Prefill bootstrap failed for request rank=0 req.rid='r-boot' req.bootstrap_room=4242 with exception "
        rf"KVTransferError\(bootstrap_room=4242\): Request 4242 timed out after {t['bootstrap_s']:.0f}\.\d+s in KVPoll.Bootstrapping",
        msg,
    ), msg
    assert leg.body["code"] == 500 and leg.body["object"] == "error"
    assert (
        gauge(stack, "prefill", "num_bootstrap_failed_reqs_total") == before + 1
    )  # absent before the first failure: 0
    assert gauge(stack, "prefill", "num_prefill_bootstrap_queue_reqs") == 0


def test_decode_waiting_timeout_fires_with_sglang_message(stack, t):
    """Only the decode leg arrives: its metadata reaches prefill, whose KV never comes."""
    before = gauge(stack, "decode", "num_transfer_failed_reqs_total")
    leg = send(stack, "/generate", {**BODY, "rid": "r-wait"}, legs=("decode",), room=777)["decode"]
    assert leg.status == 500
    assert t["waiting_s"] <= leg.elapsed_s <= t["waiting_s"] + SLACK_S
    assert re.fullmatch(
        r"Decode transfer failed for request rank=0 decode_req.req.rid='r-wait' decode_req.req.bootstrap_room=777 with exception "
        rf"KVTransferError\(bootstrap_room=777\): Request 777 timed out after {t['waiting_s']:.0f}\.\d+s in KVPoll.WaitingForInput",
        leg.body["message"],
    ), leg.body["message"]
    assert gauge(stack, "decode", "num_transfer_failed_reqs_total") == before + 1
    assert gauge(stack, "decode", "num_decode_transfer_queue_reqs") == 0


def test_prefill_inflight_watchdog_frees_a_transfer_to_a_frozen_decode(stack, t):
    """Decode is frozen after sending its metadata: the KV goes into its socket buffers, no
    ACK ever comes, and decode cannot time out itself. Only the watchdog frees the room."""
    before = gauge(stack, "prefill", "num_transfer_failed_reqs_total")
    body = {
        "input_ids": list(range(1, 1501)),
        "sampling_params": {"max_new_tokens": 4},
        "rid": "r-inflight",
    }  # 1.5 s forward
    worker, out = background(lambda: send(stack, "/generate", body, room=999, timeout_s=t["inflight_s"] + 5))
    try:
        decode_holds_a_room(stack)
        stack.freeze("decode")
        worker.join(timeout=t["inflight_s"] + 3)
    finally:
        stack.thaw("decode")
        worker.join(timeout=10)
    p = out["value"]["prefill"]
    assert p.status == 500
    forward_s = 1.5
    assert t["inflight_s"] + forward_s <= p.elapsed_s <= t["inflight_s"] + forward_s + SLACK_S
    assert (
        f"timed out after {t['inflight_s']:.0f}." in p.body["message"]
        and "in the prefill inflight queue" in p.body["message"]
    )
    assert p.body["message"].startswith(
        "Prefill transfer failed for request rank=0 req.rid='r-inflight' req.bootstrap_room=999"
    )
    assert gauge(stack, "prefill", "num_transfer_failed_reqs_total") == before + 1
    assert gauge(stack, "prefill", "num_prefill_inflight_queue_reqs") == 0


def test_decode_waiting_timeout_aborts_the_prefill_room_when_kv_stalls(stack, t):
    """The kv link is blackholed: decode's waiting timeout fires first and its ABORT frees
    the prefill room long before the inflight watchdog would."""
    with toxic(stack, "kv", "timeout", stream="upstream", timeout=0):
        legs = send(stack, "/generate", {**BODY, "rid": "r-stall"}, room=998)
    p, d = legs["prefill"], legs["decode"]
    assert d.status == 500 and t["waiting_s"] <= d.elapsed_s <= t["waiting_s"] + SLACK_S
    assert "in KVPoll.WaitingForInput" in d.body["message"] or "in KVPoll.Transferring" in d.body["message"]
    assert p.status == 500 and p.elapsed_s <= t["waiting_s"] + SLACK_S
    assert "Aborted by AbortReq." in p.body["message"]


def test_decode_heartbeat_detects_lost_prefill(stack, t):
    """With the bootstrap link down, decode's heartbeat fails interval x N and fails the room."""
    worker, out = background(lambda: send(stack, "/generate", {**BODY, "rid": "r-hb"}, legs=("decode",), room=31337))
    try:
        decode_holds_a_room(stack)
        with proxy_down(stack, "bootstrap"):
            down_at = time.monotonic()
            worker.join(timeout=t["waiting_s"] + 5)
            detected = time.monotonic() - down_at
    finally:
        worker.join(timeout=15)
    d = out["value"]["decode"]
    assert d.status == 500
    interval, n = t["heartbeat_interval_s"], t["heartbeat_max_failure"]
    assert (n - 1) * interval <= detected <= n * interval + SLACK_S
    assert "Lost connection with prefill instance (bootstrap_addr: 127.0.0.1:" in d.body["message"]
    assert d.body["message"].startswith("Decode transfer failed for request rank=0 decode_req.req.rid='r-hb'")
