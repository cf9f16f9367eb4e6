"""Workload outcomes through the real stack: each request ends as exactly one Outcome."""

from __future__ import annotations

import itertools
import socket
import threading
import time

import pytest

from chaos.clients.client import Deadlines
from chaos.clients.workloads import Workload
from chaos.faults.network import remove_toxic, toxiproxy_restarter
from chaos.observe.history import History
from chaos.observe.records import Chunk, Complete, Outcome, Phase
from chaos.system.wait import wait_until
from chaos.targets.toxiproxy import Toxic

MODEL = "pdsim/deterministic-1"
CHAT = {"model": MODEL, "messages": [{"role": "user", "content": "hello"}], "max_tokens": 4, "ignore_eos": True}
LONG = {**CHAT, "max_tokens": 300, "stream": True}  # about 3 s of tokens


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(
    "path, body",
    [
        ("/v1/chat/completions", CHAT),
        ("/generate", {"text": "hi", "sampling_params": {"max_new_tokens": 4, "ignore_eos": True}}),
    ],
)
def test_ok(workload, path, body, stream):
    usage = {"stream_options": {"include_usage": True}} if stream and "messages" in body else {}
    reply = workload.request(path, {**body, "stream": stream, **usage})
    assert reply.outcome is Outcome.OK and reply.reply and reply.completion_tokens == 4


def test_error_status_is_a_clean_error(workload):
    reply = workload.request("/v1/chat/completions", {"messages": [{"role": "user", "content": "no model"}]})
    assert reply.outcome is Outcome.CLEAN_ERROR and reply.status == 400


def test_sse_abort_event_is_a_clean_error(stack, history, seed):
    engine = Workload(stack.info.endpoints["prefill"], history, seed, MODEL)  # prefill alone: bootstrap times out
    host, _, port = stack.info.proxies["bootstrap"]["listen"].rpartition(":")
    body = {"text": "alone", "stream": True, "bootstrap_host": host, "bootstrap_port": int(port), "bootstrap_room": 5}
    reply = engine.request("/generate", body)
    assert reply.outcome is Outcome.CLEAN_ERROR and "KVPoll.Bootstrapping" in reply.error


def test_blackholed_router_link_is_a_client_timeout(workload, faults):
    with faults.blackhole("client_router"):
        t0 = time.monotonic()
        reply = workload.request("/v1/chat/completions", CHAT, deadlines=Deadlines(read_s=1.0, total_s=5.0))
    assert reply.outcome is Outcome.CLIENT_TIMEOUT and time.monotonic() - t0 < 2.0


def test_refused_connection_is_a_connection_error(workload, faults):
    with faults.down("client_router"):
        reply = workload.request("/v1/chat/completions", CHAT)
    assert reply.outcome is Outcome.CONNECTION_ERROR


def test_total_deadline_cuts_a_long_stream(workload):
    t0 = time.monotonic()
    reply = workload.request("/v1/chat/completions", LONG, deadlines=Deadlines(total_s=1.0))
    assert reply.outcome is Outcome.CLIENT_TIMEOUT and time.monotonic() - t0 < 1.5


@pytest.mark.parametrize("by_event", [False, True])
def test_a_client_hangs_up_after_its_events_or_once_told(workload, by_event):
    """``hang_up_after``: N data events, or the first event after a scenario sets the event;
    either way the stream ends ``hung_up`` with only part of its reply."""
    told = threading.Event()
    stream = workload.background([LONG], hang_up_after=told if by_event else 3)
    if by_event:
        wait_until(lambda: any(True for _ in workload.history.of(Chunk)), timeout_s=10, what="a chunk")
        told.set()
    (reply,) = stream.join()
    assert reply.outcome is Outcome.HUNG_UP and reply.completion_tokens is None


def test_limit_data_mid_stream_is_truncated(workload, faults):
    with faults.limit_data("client_router", 3000):
        reply = workload.request("/v1/chat/completions", LONG)
    assert reply.outcome is Outcome.TRUNCATED


def test_silence_inside_an_open_stream_is_stalled(stack, workload, faults, history):
    out: dict[str, Complete] = {}
    th = threading.Thread(
        target=lambda: out.update(r=workload.request("/v1/chat/completions", LONG, deadlines=Deadlines(stall_s=1.0)))
    )
    th.start()
    wait_until(lambda: any(isinstance(r, Chunk) for r in history.records), timeout_s=5, what="first chunk")
    faults.toxiproxy.add_toxic("client_router", Toxic("hole", "timeout", attributes={"timeout": 0}))
    try:
        th.join(timeout=10)
    finally:
        remove_toxic(faults.toxiproxy, "client_router", "hole", restart_toxiproxy=toxiproxy_restarter(stack))
    assert out["r"].outcome is Outcome.STALLED


def test_conversations_grow_their_context_and_are_reproducible(workload, history):
    first = workload.conversations(agents=2, rounds=3, max_tokens=4, phase=Phase.BASELINE).run()
    second = workload.conversations(agents=2, rounds=3, max_tokens=4, phase=Phase.AFTER).run()
    for agent, replies in first.items():
        assert [r.outcome for r in replies] == [Outcome.OK] * 3
        tokens = [r.prompt_tokens for r in replies]
        assert tokens == sorted(tokens) and len(set(tokens)) == 3
        assert [r.reply for r in replies] == [r.reply for r in second[agent]]  # same seed, same talk
    assert first["agent0"][0].reply != first["agent1"][0].reply


@pytest.mark.parametrize("stream", [True, False])
def test_total_deadline_holds_against_a_server_that_never_answers(stream, silent_server):
    """The seed incident's client, inside our own: a server accepts the connection and never
    sends a head. The request must end as client_timeout at total_s, not at stall_s."""
    w = Workload(silent_server, History(), 1, MODEL, deadlines=Deadlines(read_s=60, stall_s=60, total_s=1.5))
    t0 = time.monotonic()
    reply = w.request("/v1/chat/completions", w.chat("hello?", max_tokens=2, stream=stream))
    took = time.monotonic() - t0
    assert reply.outcome is Outcome.CLIENT_TIMEOUT and "total deadline 1.5s" in reply.error, reply
    assert 1.5 <= took < 3.0, took


def test_total_deadline_cuts_a_body_that_never_comes():
    """A non-streaming reply whose head arrives and whose body does not: the total deadline
    closes the response mid-read, which httpx reports as StreamClosed (not an HTTPError). It
    is a client_timeout, never an exception out of the client (seen on real SGLang: a probe's
    200 came 4.97 s into its 5 s deadline, and the escaped exception erred the test)."""
    release = threading.Event()
    with socket.create_server(("127.0.0.1", 0)) as server:
        server.settimeout(5)

        def head_only() -> None:
            conn = server.accept()[0]
            with conn:
                conn.recv(65536)
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{")
                release.wait(10)

        t = threading.Thread(target=head_only, daemon=True)
        t.start()
        w = Workload(
            f"http://127.0.0.1:{server.getsockname()[1]}",
            History(),
            1,
            MODEL,
            deadlines=Deadlines(read_s=60, stall_s=60, total_s=1.0),
        )
        try:
            reply = w.request("/v1/chat/completions", w.chat("hello?", max_tokens=2))
        finally:
            release.set()
            t.join(5)
    assert reply.outcome is Outcome.CLIENT_TIMEOUT and "total deadline 1s" in reply.error, reply


def test_background_with_an_interval_sends_on_its_schedule(workload, history):
    """Open-loop arrivals: the sends leave ``interval_s`` apart, each recorded at its send."""
    done = workload.background([CHAT] * 4, interval_s=0.3).join()
    sent = sorted(op.invoke.t for op in history.ops())
    assert [c.outcome for c in done] == [Outcome.OK] * 4
    gaps = [b - a for a, b in itertools.pairwise(sent)]
    assert all(0.25 <= g <= 0.6 for g in gaps), gaps


def test_a_stopped_schedule_sends_no_more(workload, history):
    """Arrivals until told to stop: the sends already made end as ever, the rest are never
    made, and ``join`` returns the ones made."""
    stop = threading.Event()
    flow = workload.background([CHAT] * 50, interval_s=0.1, stop=stop)
    wait_until(lambda: len(history.ops()) >= 3, timeout_s=10, what="three sends")
    stop.set()
    done = flow.join()
    assert 3 <= len(done) < 50 and all(c.outcome is Outcome.OK for c in done)
    assert len(history.ops()) == len(done)
