"""Hostile and malformed input, through the router: every request the client got wrong is
refused with a clear 4xx in time; no engine or router crashes or restarts; nothing leaks;
other clients' requests in flight are served as they would have been; and no request reaches
an address the client chose.

Bug classes (the field survey, ``docs/known-issues.md``): a duplicate client
``bootstrap_room`` crashed both schedulers (sglang#40125, SGLang 0.5.17 over TCP); clients
can send the PD fields themselves (``bootstrap_host``, ``bootstrap_port``, ``bootstrap_room``),
and an engine that follows them dials the client's address for its KV handshake; parsers
that answer a 500 (the service's fault, charged to a worker's breaker) to bytes that are the
client's; servers that wait without end for a body that never finishes.

The canary (``chaos.observe.canary``) listens on the stack's one port where no service does;
the hostile requests name it as their bootstrap server. What each target answers to each
input is in docs/hostile-input.md.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pytest

from chaos import verdicts as v
from chaos.clients.client import Deadlines
from chaos.clients.workloads import OVER_ANY_CONTEXT
from chaos.observe.canary import DIALS, Canary
from chaos.observe.pipeline import ENGINE_QUEUES, ROUTER_INFLIGHT
from chaos.observe.records import Phase
from chaos.run.skips import SkipKind, skip

pytestmark = [pytest.mark.fault("client")]

SERVICES = ("prefill", "decode", "router")
CONVERSATION = dict(agents=2, rounds=2, words_per_round=40, max_tokens=16)
ROOM = 4242  # the bootstrap room the hostile clients choose, twice at once


@dataclass(frozen=True)
class Hostile:
    """One input a client gets wrong: why it is wrong, where it goes, what it asks (for the
    record) and the bytes sent, where they are not ``asks``'s JSON."""

    why: str
    path: str
    asks: dict[str, Any]
    content: bytes | None = None


def _catalog(model: str) -> list[Hostile]:
    """The inputs, each the client's own error; a healthy stack refuses each with a 4xx."""

    def chat(**fields: Any) -> dict[str, Any]:
        return {"model": model, "messages": [{"role": "user", "content": "hello"}], "max_tokens": 2, **fields}

    said = chat()
    return [
        Hostile("malformed JSON: the body ends inside an object", "/v1/chat/completions", said,
                json.dumps(said).encode()[:-9]),
        Hostile("invalid UTF-8 inside a string", "/v1/chat/completions", said,
                json.dumps(said).encode().replace(b"hello", b"\xff\xfe\xfd")),
        Hostile("a JSON array, not an object", "/generate", {}, b"[1, 2, 3]"),
        Hostile("messages is a string, not a list", "/v1/chat/completions", chat(messages="hello")),
        Hostile("text is a number", "/generate", {"text": 12345, "sampling_params": {"max_new_tokens": 2}}),
        Hostile("a negative temperature", "/v1/chat/completions", chat(temperature=-1.0)),
        Hostile("top_p above 1", "/v1/chat/completions", chat(top_p=1.5)),
        Hostile("top_k of 0", "/generate", {"text": "hello", "sampling_params": {"max_new_tokens": 2, "top_k": 0}}),
        Hostile("a negative max_tokens", "/v1/chat/completions", chat(max_tokens=-1)),
        Hostile("max_tokens beyond any context", "/v1/chat/completions", chat(max_tokens=10**9)),
        Hostile("a prompt over any context", "/v1/chat/completions",
                chat(messages=[{"role": "user", "content": "word " * OVER_ANY_CONTEXT}])),
    ]  # fmt: skip


@pytest.fixture
def canary(scenario):
    """The rig's listener on the stack's canary port, for the test's length."""
    url = scenario.target.info.endpoints.get("canary")
    if url is None:
        skip(SkipKind.TARGET, "the stack names no canary port (an attach stack file's endpoints.canary)")
    with Canary(scenario.history, url) as listening:
        yield listening


def test_hostile_requests_are_refused_clearly(scenario, workload, faults, bounds, canary):
    """Each input of the catalog is refused with a 4xx that says what is wrong, within the
    time the stack may take to turn away what it can never serve; two requests that choose
    the same bootstrap room and name the canary as their bootstrap server are served as any
    other (the router sets the PD fields itself) and nothing dials the canary; conversations
    in flight meanwhile are served with their fault-free replies; every service keeps its
    process; nothing is held once it is over."""
    catalog = _catalog(workload.model)
    host, port = canary.address
    chosen = {"bootstrap_host": host, "bootstrap_port": port, "bootstrap_room": ROOM}
    scenario.watch_processes(*SERVICES)
    scenario.judge(
        v.client_errors_refused(within_s=bounds.refuse_s),
        v.statuses_tell_the_truth(),
        v.valid_requests_served(phase=Phase.FAULT),
        v.replies_match_baseline(),
        v.stayed_up(SERVICES),
        v.counter_never_rises(DIALS, why="no request reaches an address its client chose"),
    )
    scenario.baseline(**CONVERSATION)
    others = workload.conversations(**CONVERSATION, phase=Phase.FAULT).start()
    with faults.by_clients(f"{len(catalog)} malformed or impossible requests; 2 choosing their bootstrap"):
        their_own = workload.background(
            [workload.chat("which bootstrap is mine", max_tokens=4, **chosen) for _ in range(2)], phase=Phase.FAULT
        )
        for hostile in catalog:
            workload.request(
                hostile.path, hostile.asks, content=hostile.content, invalid=hostile.why, phase=Phase.FAULT
            )
        their_own.join()
        others.join()
    scenario.settle(ENGINE_QUEUES + ROUTER_INFLIGHT, within_s=bounds.quiet_s)


def test_unfinished_bodies_are_refused_in_time(scenario, workload, faults, bounds):
    """A head that declares a body beyond any sane size (1 GiB, past smg's 512 MB limit) is
    refused with a 4xx at once, before the body comes; a body that stops partway is given up
    with a 4xx by the stack's own request timeout, not waited for without end. Neither holds
    anything once given up, nor stops a conversation meanwhile."""
    deadlines = Deadlines(read_s=bounds.router_timeout_s, total_s=bounds.router_timeout_s + 2 * bounds.slack_s)
    said = json.dumps(workload.chat("hello", max_tokens=2)).encode()
    scenario.watch_processes(*SERVICES)
    scenario.judge(
        v.client_errors_refused(within_s=bounds.router_timeout_s + bounds.slack_s),
        v.statuses_tell_the_truth(),
        v.valid_requests_served(phase=Phase.FAULT),
        v.stayed_up(SERVICES),
    )
    others = workload.conversations(**CONVERSATION, phase=Phase.FAULT).start()
    with faults.by_clients("a body declared at 1 GiB; a body that stops partway"):
        workload.unfinished(
            "/v1/chat/completions",
            declared=1 << 30,
            sent=said,
            invalid="a body declared beyond any sane size",
            phase=Phase.FAULT,
            deadlines=deadlines,
        )
        workload.unfinished(
            "/v1/chat/completions",
            declared=len(said) + 4096,
            sent=said[:-1],
            invalid="a body that never finishes",
            phase=Phase.FAULT,
            deadlines=deadlines,
        )
        others.join()
    scenario.settle(ENGINE_QUEUES + ROUTER_INFLIGHT, within_s=bounds.quiet_s)
