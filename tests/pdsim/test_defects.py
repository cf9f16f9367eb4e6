"""Each pdsim defect changes behaviour as pdsim/README.md documents.

Every test starts a stack with one defect on (and, where the clean behaviour is not
already covered by test_timeouts.py, the same scenario on a clean stack), and checks the
difference through the black-box interface only: HTTP, metrics, Toxiproxy.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

import httpx
import psutil
import pytest

from chaos.errors import FaultNotApplied
from chaos.faults.mismatch import MismatchedStart
from chaos.system.topology import Topology
from chaos.system.wait import wait_until
from chaos.targets.stack import Timeouts
from tests.pdpair import background, decode_holds_a_room, gauge, proxy_down, send, toxic

BODY = {"text": "defect probe", "sampling_params": {"max_new_tokens": 4}}


@pytest.fixture
def start(stack_factory):
    started = []

    def _start(defects: str = "", **overrides: Any):
        s = stack_factory.start(defects=defects, **overrides)
        started.append(s)
        return s

    yield _start
    for s in started:
        stack_factory.stop(s)


def test_no_bootstrap_timeout_leaves_prefill_waiting(start):
    s = start("no_bootstrap_timeout")
    t = s.info.config["timeouts"]
    leg = send(s, "/generate", BODY, legs=("prefill",), timeout_s=t["bootstrap_s"] + 2)["prefill"]
    assert leg.timed_out, f"bootstrap timeout fired although it is a no-op: {leg}"


def test_no_inflight_watchdog_pins_a_transfer_to_a_frozen_decode(start):
    s = start("no_inflight_watchdog")
    t = s.info.config["timeouts"]
    body = {"input_ids": list(range(1, 1501)), "sampling_params": {"max_new_tokens": 4}}  # 1.5 s forward
    th, out = background(lambda: send(s, "/generate", body, timeout_s=t["inflight_s"] + 6))
    try:
        decode_holds_a_room(s)
        s.freeze("decode")
        th.join(timeout=t["inflight_s"] + 3.5)
        assert gauge(s, "prefill", "num_prefill_inflight_queue_reqs") == 1  # pinned past the watchdog
    finally:
        s.thaw("decode")
        th.join(timeout=10)
    # freed only once the thawed decode's own waiting timeout aborted it, never by the watchdog:
    # by the abort decode tells, or by the KV connection it closed failing prefill's send,
    # whichever reaches prefill first (the second seen once under two busy workers)
    message = out["value"]["prefill"].body["message"]
    assert "Aborted by AbortReq." in message or "Failed to send kv chunk" in message, message


def test_idle_watchdog_fires_only_when_traffic_arrives(start):
    s = start("idle_watchdog")
    t = s.info.config["timeouts"]
    th, out = background(lambda: send(s, "/generate", BODY, legs=("prefill",), timeout_s=30))
    th.join(timeout=t["bootstrap_s"] + 1.5)
    assert th.is_alive(), "the lone request was failed although no traffic arrived"
    assert gauge(s, "prefill", "num_prefill_bootstrap_queue_reqs") == 1
    send(s, "/generate", BODY, legs=("prefill",), timeout_s=0.5)  # any arrival wakes the check
    th.join(timeout=5)
    leg = out["value"]["prefill"]
    assert leg.status == 500 and "KVPoll.Bootstrapping" in leg.body["message"]


def _abort_mid_stream(s) -> None:
    body = {"text": "a long story", "sampling_params": {"max_new_tokens": 500, "ignore_eos": True}, "stream": True}
    with (
        httpx.Client(base_url=s.info.endpoints["client"], timeout=httpx.Timeout(10, connect=2)) as c,
        c.stream("POST", "/generate", json=body) as r,
    ):
        for line in r.iter_lines():
            if line.startswith("data: "):
                break  # first token arrived: hang up mid-stream


@pytest.mark.parametrize("defects", ["", "leak_on_abort"])
def test_client_abort_frees_decode_unless_leak_on_abort(start, defects):
    s = start(defects)
    _abort_mid_stream(s)
    if not defects:
        wait_until(
            lambda: gauge(s, "decode", "num_running_reqs") == 0 and gauge(s, "decode", "num_used_tokens") == 0,
            timeout_s=3,
            what="decode freed",
        )
        return
    with pytest.raises(Exception, match="decode freed"):
        wait_until(lambda: gauge(s, "decode", "num_running_reqs") == 0, timeout_s=3, what="decode freed")
    assert gauge(s, "decode", "num_used_tokens") > 0


@pytest.mark.parametrize("defects", ["", "no_abort_to_decode"])
def test_prefill_failure_is_told_to_decode_unless_no_abort_to_decode(start, defects):
    """The kv link is down: prefill's transfer fails at once; decode hears of it at once,
    or, with the defect, holds its slot until its own waiting timeout."""
    s = start(defects)
    t = s.info.config["timeouts"]
    with proxy_down(s, "kv"):
        legs = send(s, "/generate", BODY, timeout_s=t["waiting_s"] + 4)
    assert legs["prefill"].status == 500 and legs["prefill"].elapsed_s < 1.0
    d = legs["decode"]
    assert d.status == 500
    if not defects:
        assert d.elapsed_s < 1.0 and "Failed to get kvcache from prefill instance" in d.body["message"]
    else:
        assert d.elapsed_s >= t["waiting_s"] and "in KVPoll.WaitingForInput" in d.body["message"]


@pytest.mark.parametrize("defects", ["", "stale_bootstrap_cache"])
def test_decode_after_prefill_restart(start, defects):
    s = start(defects)
    s.restart("prefill")
    t = s.info.config["timeouts"]
    legs = send(s, "/generate", BODY, timeout_s=t["bootstrap_s"] + 3)
    if not defects:
        assert legs["prefill"].status == 200 and legs["decode"].status == 200
    else:
        assert legs["prefill"].status == 500 and "KVPoll.Bootstrapping" in legs["prefill"].body["message"]


@pytest.mark.parametrize("defects", ["", "stale_decode_registration"])
def test_prefill_after_decode_restart(start, defects):
    s = start(defects)
    first = send(s, "/generate", BODY, timeout_s=10)
    assert first["prefill"].status == 200 and first["decode"].status == 200  # prefill has met the first decode
    s.restart("decode")
    legs = send(s, "/generate", BODY, timeout_s=10)
    if not defects:
        assert legs["prefill"].status == 200 and legs["decode"].status == 200
    else:
        assert legs["decode"].status == 500 and "KV for decode instance" in legs["decode"].body["message"]


@pytest.mark.parametrize("defects", ["", "stuck_transferring"])
def test_transferring_rooms_time_out_unless_stuck_transferring(start, defects):
    s = start(defects, timeouts=replace(Timeouts.from_env(), inflight_s=60))
    t = s.info.config["timeouts"]
    body = {"input_ids": list(range(1, 301)), "sampling_params": {"max_new_tokens": 2}}  # 300 KB of KV
    with toxic(s, "kv", "bandwidth", stream="upstream", rate=1):
        legs = send(s, "/generate", body, timeout_s=t["waiting_s"] + 2.5)
    d = legs["decode"]
    if not defects:
        assert d.status == 500 and "in KVPoll.Transferring" in d.body["message"]
    else:
        assert d.timed_out, f"a Transferring room timed out although the defect is on: {d}"


def _ask_concurrently(s, prompts: list[str]) -> list[str]:
    import asyncio

    async def go() -> list[str]:
        async with httpx.AsyncClient(base_url=s.info.endpoints["client"], timeout=httpx.Timeout(20, connect=2)) as c:
            rs = await asyncio.gather(
                *(
                    c.post(
                        "/generate",
                        json={
                            "text": p,
                            "sampling_params": {"max_new_tokens": 16, "ignore_eos": True, "temperature": 0},
                        },
                    )
                    for p in prompts
                )
            )
        return [r.json()["text"] for r in rs]

    return asyncio.run(go())


@pytest.mark.parametrize("defects", ["", "room_mixup"])
def test_concurrent_replies_match_their_baseline_unless_room_mixup(start, defects):
    s = start(defects)
    prompts = [f"conversation number {i} about topic {i * 7}" for i in range(8)]
    baseline = [_ask_concurrently(s, [p])[0] for p in prompts]
    concurrent = _ask_concurrently(s, prompts)
    mismatches = sum(a != b for a, b in zip(baseline, concurrent, strict=False))
    assert (mismatches > 0) == bool(defects), f"{mismatches} of 8 replies differ from their baseline"


def test_context_truncation_drops_earlier_turns(stack, start):
    s = start("context_truncation")
    messages = [
        {"role": "user" if i % 2 == 0 else "assistant", "content": f"turn {i} " + "words " * 30} for i in range(12)
    ]
    body = {"model": "pdsim/deterministic-1", "messages": messages, "max_tokens": 2}

    def prompt_tokens(target) -> int:
        return httpx.post(target.info.endpoints["client"] + "/v1/chat/completions", json=body, timeout=10).json()[
            "usage"
        ]["prompt_tokens"]

    full, truncated = prompt_tokens(stack), prompt_tokens(s)
    assert truncated < full, (truncated, full)


def _stream_events(s) -> list[str]:
    from tests.pdpair import pd_fields

    body = {**BODY, "stream": True, **pd_fields(s)}
    with (
        httpx.Client(timeout=httpx.Timeout(10, connect=2)) as c,
        c.stream("POST", s.info.endpoints["prefill"] + "/generate", json=body) as r,
    ):
        return [ln for ln in r.iter_lines() if ln.startswith("data: ")]


@pytest.mark.parametrize("defects", ["", "silent_stream_end"])
def test_aborted_stream_ends_with_an_abort_event_unless_silent(start, defects):
    s = start(defects)
    events = _stream_events(s)  # prefill-only: fails at the bootstrap timeout
    if not defects:
        assert events[-1] == "data: [DONE]" and '"type":"abort"' in events[-2] and '"status_code":500' in events[-2]
    else:
        assert events == []


def test_no_heartbeat_never_notices_a_lost_prefill(start):
    s = start("no_heartbeat")
    t = s.info.config["timeouts"]
    th, out = background(lambda: send(s, "/generate", BODY, legs=("decode",), timeout_s=t["waiting_s"] + 3))
    decode_holds_a_room(s)
    with proxy_down(s, "bootstrap"):
        th.join(timeout=t["waiting_s"] + 5)
    d = out["value"]["decode"]
    assert d.status == 500 and "Lost connection" not in d.body["message"]
    assert "in KVPoll.WaitingForInput" in d.body["message"]


@pytest.mark.parametrize("defects", ["", "sigterm_cuts_streams"])
def test_sigterm_drains_open_requests_unless_sigterm_cuts_streams(start, defects):
    """SGLang's SIGTERM: /health says 503 at once, the request decode holds runs to its end,
    then decode exits; with the defect it exits at once and the request is cut."""
    s = start(defects)
    body = {"text": "drain me", "sampling_params": {"max_new_tokens": 150, "ignore_eos": True}}  # 1.5 s of decoding

    def decode_leg() -> Any:
        try:
            return send(s, "/generate", body, timeout_s=10)["decode"]
        except httpx.HTTPError as exc:  # the connection cut mid-answer
            return exc

    th, out = background(decode_leg)
    wait_until(lambda: gauge(s, "decode", "num_running_reqs") >= 1, timeout_s=5, what="decode running the request")
    s.terminate("decode")
    if not defects:
        health = httpx.get(s.info.endpoints["decode"] + "/health", timeout=2.0)
        assert health.status_code == 503
    th.join(timeout=12)
    decode = out["value"]
    if defects:
        assert isinstance(decode, httpx.HTTPError) or decode.status != 200, f"a cut request was answered: {decode}"
    else:
        assert decode.status == 200 and len(decode.body["output_ids"]) == 150, decode
    wait_until(lambda: not s.is_running("decode"), timeout_s=5, what="decode gone after its drain")


@pytest.mark.parametrize("defects", ["", "kv_socket_leak"])
def test_finished_kv_connections_are_closed_unless_kv_socket_leak(start, defects):
    """Counted as decode's sockets the other side has closed (CLOSE_WAIT): a descriptor
    count would also move with connections that come and go."""
    s = start(defects)
    decode = psutil.Process(s.main_pid("decode"))

    def kept() -> int:
        return sum(1 for c in decode.net_connections(kind="tcp") if c.status == psutil.CONN_CLOSE_WAIT)

    for _ in range(6):
        assert send(s, "/generate", BODY)["decode"].status == 200
    if defects:  # each finished transfer's socket stays open once prefill's side has closed
        wait_until(lambda: kept() >= 6, timeout_s=3, what="six KV sockets kept in CLOSE_WAIT")
    else:
        wait_until(lambda: kept() == 0, timeout_s=3, what="no KV socket kept")


@pytest.mark.parametrize("defects", ["", "waiting_clock_from_arrival"])
def test_queued_requests_keep_their_waiting_time_unless_waiting_clock_from_arrival(start, defects):
    """Decode runs 1 request at a time with 3 slots (SGLang 0.5.23's extra slots), so of 6
    requests of 2 s each the 5th and 6th queue in prealloc for about 4 and 6 s, twice and
    three times the 2 s waiting timeout: they must succeed, as the clock starts when decode
    sends their metadata; with the defect it started on arrival and they fail on admission."""
    s = start(defects, max_running_requests=1, timeouts=Timeouts(bootstrap_s=30, waiting_s=2, inflight_s=20))
    # a prompt whose forward takes 0.3 s: decode's watchdog then looks at an admitted request
    # while it still waits for its KV (3 tokens' KV lands within one 5 ms tick, before any look)
    body = {"text": "queue me " * 150, "sampling_params": {"max_new_tokens": 200, "ignore_eos": True}}
    peak = {"prealloc": 0.0, "running": 0.0}
    runs = [background(lambda: send(s, "/generate", body, timeout_s=30)) for _ in range(6)]

    def done() -> bool:
        peak["prealloc"] = max(peak["prealloc"], gauge(s, "decode", "num_decode_prealloc_queue_reqs"))
        peak["running"] = max(peak["running"], gauge(s, "decode", "num_running_reqs"))
        return not any(th.is_alive() for th, _ in runs)

    wait_until(done, timeout_s=30, what="six queued requests ended")
    statuses = [out["value"]["decode"].status for _, out in runs]
    assert peak["running"] <= 1 and peak["prealloc"] >= 2, f"decode admitted past its slots: {peak}"
    if defects:
        assert any(st == 500 for st in statuses), f"no queued request failed on admission: {statuses}"
    else:
        assert statuses == [200] * 6, statuses


@pytest.mark.parametrize("defects", ["", "decode_prefix_kv_misplaced"])
def test_cached_prefix_replies_equal_uncached_ones_unless_decode_prefix_kv_misplaced(start, defects):
    """With decode's radix cache on, a request extending a finished one is served from the
    cached prefix; its reply must equal the one it gets after ``/flush_cache`` (prefill's KV
    alone), and with the defect it does not."""
    s = start(defects, decode_radix_cache=True)
    first = {
        "input_ids": list(range(1, 101)),
        "sampling_params": {"max_new_tokens": 4, "ignore_eos": True, "temperature": 0},
    }
    reply = send(s, "/generate", first)["decode"].body["output_ids"]
    longer = {**first, "input_ids": [*first["input_ids"], *reply, *range(200, 220)]}
    cached = send(s, "/generate", longer)["decode"].body["output_ids"]
    assert httpx.post(f"{s.info.endpoints['decode']}/flush_cache", timeout=5).status_code == 200
    uncached = send(s, "/generate", longer)["decode"].body["output_ids"]
    assert (cached != uncached) == bool(defects), (cached, uncached)


@pytest.mark.parametrize("defects", ["", "abort_frees_kv_mid_transfer"])
def test_aborted_kv_lands_in_the_next_owner_only_with_abort_frees_kv_mid_transfer(start, defects):
    """A request hung up on while its KV crosses a slowed link, then one that takes its
    pages: that one's reply equals its fault-free reply, unless the defect lets the rest of
    the aborted KV land in its pages."""
    s = start(defects)
    client = s.info.endpoints["client"] + "/generate"
    owner = {"text": "the next owner", "sampling_params": {"max_new_tokens": 300, "ignore_eos": True, "temperature": 0}}
    baseline = httpx.post(client, json=owner, timeout=20).json()["text"]
    aborted = {
        "input_ids": list(range(1, 401)),
        "sampling_params": {"max_new_tokens": 4},
    }  # a 0.4 s forward, then 400 KB of KV
    with toxic(s, "kv", "bandwidth", stream="upstream", rate=50):  # the KV crosses in 8 s
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(client, json=aborted, timeout=httpx.Timeout(1.5, connect=2))  # hung up on mid-transfer
        wait_until(
            lambda: gauge(s, "decode", "num_decode_transfer_queue_reqs") == 0,
            timeout_s=3,
            what="decode let the aborted room go",
        )
        reply = httpx.post(client, json=owner, timeout=20).json()["text"]  # 3 s of decoding while the rest crosses
    assert (reply != baseline) == bool(defects)


@pytest.mark.parametrize("defects", ["", "idle_transfer_stall"])
def test_the_first_transfer_after_idle_goes_at_once_unless_idle_transfer_stall(start, defects):
    """After 5 s without a transfer, the next one starts at once; with the defect it waits 80 %
    of decode's waiting timeout (4 s of 5 here), and its request is served that much later."""
    s = start(defects, timeouts=Timeouts(bootstrap_s=30, waiting_s=5, inflight_s=20))
    assert send(s, "/generate", BODY, timeout_s=10)["decode"].status == 200  # a transfer: none idle yet
    time.sleep(5.5)  # the idle itself, past pdsim's 5 s gap: nothing to wait for
    began = time.monotonic()
    assert send(s, "/generate", BODY, timeout_s=15)["decode"].status == 200
    took = time.monotonic() - began
    if defects:
        assert took >= 4.0, f"served {took:.2f}s after an idle: no stall"
    else:
        assert took < 4.0, f"served {took:.2f}s after an idle: stalled"


@pytest.mark.parametrize("defects", ["", "page_size_unchecked"])
def test_a_prefill_of_another_page_size_is_refused_at_once_unless_page_size_unchecked(start, defects):
    """Decode with 16 tokens a page, prefill with 1: clean decode fails the request at once
    with SGLang's words for it, and serves on; with the defect it takes the KV, which lands in
    pages that are not the room's, and the request waits for decode's waiting timeout."""
    s = start(
        defects, decode_page_size=16, warm_up_words=(), timeouts=Timeouts(bootstrap_s=30, waiting_s=3, inflight_s=20)
    )
    began = time.monotonic()  # decode's leg alone: prefill's waits for its bootstrap timeout, never told
    leg = send(s, "/generate", BODY, legs=("decode",), timeout_s=15)["decode"]
    took = time.monotonic() - began
    assert leg.status == 500, leg
    if defects:
        assert took >= 3.0 and "WaitingForInput" in leg.body["message"], (took, leg)
    else:
        assert took < 3.0 and "Page size mismatch" in leg.body["message"], (took, leg)
        assert s.is_running("decode")
        assert "--page-size 16 in decode's command line" in MismatchedStart(s, "decode", "--page-size", 16).verify()
        with pytest.raises(FaultNotApplied, match="page-size None, not 16"):
            MismatchedStart(start(""), "decode", "--page-size", 16).verify()
        with pytest.raises(FaultNotApplied, match="default --page-size"):
            MismatchedStart(s, "decode", "--page-size", None).verify()


@pytest.mark.parametrize("defects", ["", "lost_prefill_fails_every_room"])
def test_decode_gives_up_only_the_rooms_of_the_prefill_it_lost_unless_lost_prefill_fails_every_room(start, defects):
    """2P1D: decode waits on a 6 s forward of prefill while prefill2, which it has served from
    before, is killed. Its heartbeat gives prefill2 up within seconds; clean decode fails only
    prefill2's rooms and serves prefill's request, with the defect it fails that one too."""
    s = start(defects, topology=Topology(2, 1), timeouts=Timeouts(bootstrap_s=30, waiting_s=30, inflight_s=40))
    assert send(s, "/generate", BODY, legs=("prefill2", "decode"), prefill="prefill2")["decode"].status == 200
    long = {"input_ids": list(range(1, 6001)), "sampling_params": {"max_new_tokens": 4}}  # a 6 s forward
    th, out = background(lambda: send(s, "/generate", long, timeout_s=20))
    decode_holds_a_room(s)
    s.kill("prefill2")
    th.join(timeout=20)
    leg = out["value"]["decode"]
    if defects:
        assert leg.status == 500 and "Lost connection with prefill" in leg.body["message"], leg
    else:
        assert leg.status == 200, leg
    assert "node_failure" in s.logs("decode")  # the heartbeat gave prefill2 up either way
