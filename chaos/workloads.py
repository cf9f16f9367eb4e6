"""Workloads over httpx: one-shot and streaming requests, and multi-round conversations.

Every request has a client deadline: connect, read (until the response head; for a
non-stream request that is the whole reply), stall (the longest silence inside an open
stream) and total (enforced by a timer that closes the response, so no read can outlive
it). Each request ends as exactly one ``Outcome``; ``classify_exception`` is the one place
where httpx's errors become outcomes.

A conversation is what an agent harness does: each agent holds one keep-alive connection
and, each round, sends the whole conversation so far plus new text.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import random
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import httpx
from tenacity import RetryError, Retrying, retry_if_result, stop_after_attempt, stop_after_delay, wait_fixed

from chaos.history import Chunk, Complete, History, Invoke, Outcome

__all__ = ["Conversation", "Deadlines", "Reply", "Workload", "classify_exception"]

WORDS = "river stone lantern orchard meadow signal harbor copper thread canyon beacon ember glacier".split()


def trace_headers(op: str) -> dict[str, str]:
    """What lets the reports follow a request into the logs (``chaos.reports.logs``): smg
    logs ``x-request-id`` as its request_id, pdsim logs it as xrid; real SGLang ignores it
    but logs ``routing_key``, which smg forwards from ``x-smg-routing-key`` (smg routes by
    that header only under its manual and consistent_hashing policies; our stacks run its
    default, cache_aware, with one worker a side)."""
    return {"x-request-id": op, "x-smg-routing-key": op}


@dataclass(frozen=True)
class Deadlines:
    """Client-side bounds, in seconds; no ``None``: every wait is bounded."""

    connect_s: float = 2.0
    read_s: float = 20.0
    stall_s: float = 5.0
    total_s: float = 30.0

    def __post_init__(self) -> None:
        for name in ("connect_s", "read_s", "stall_s", "total_s"):
            if getattr(self, name) <= 0:
                raise ValueError(f"Deadlines.{name} must be > 0")


@dataclass
class Reply:
    op: str
    outcome: Outcome
    status: int | None = None
    text: str = ""
    error: str = ""
    prompt_tokens: int | None = None
    completion_tokens: int | None = None

    @property
    def ok(self) -> bool:
        return self.outcome is Outcome.OK


def classify_exception(exc: Exception, *, got_head: bool, stream: bool) -> Outcome:
    """The most specific outcome for an httpx error (before or after the response head)."""
    if isinstance(exc, (httpx.ConnectTimeout, httpx.PoolTimeout)):
        return Outcome.CLIENT_TIMEOUT
    if isinstance(exc, httpx.ReadTimeout):
        return Outcome.STALLED if (got_head and stream) else Outcome.CLIENT_TIMEOUT
    if isinstance(exc, httpx.TimeoutException):
        return Outcome.CLIENT_TIMEOUT
    if isinstance(exc, (httpx.ConnectError,)):
        return Outcome.CONNECTION_ERROR
    if isinstance(exc, (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError, httpx.CloseError)):
        return Outcome.TRUNCATED if got_head else Outcome.CONNECTION_ERROR
    return Outcome.CONNECTION_ERROR


def _error_text(raw: bytes) -> str:
    try:
        body = json.loads(raw)
    except ValueError:
        return raw.decode(errors="replace")[:500]
    if isinstance(body, dict):
        err = body.get("error", body)
        if isinstance(err, dict):
            return str(err.get("message", err))
        return str(err)
    return str(body)


class _Parse:
    """Accumulates a reply from a JSON body or SSE events of any of the three endpoints."""

    def __init__(self) -> None:
        self.text = ""
        self.finish: Any = None
        self.error = ""
        self.prompt_tokens: int | None = None
        self.completion_tokens: int | None = None
        self.done = False

    def event(self, obj: dict[str, Any], *, delta: bool) -> None:
        if "error" in obj:
            self.error = _error_text(json.dumps(obj).encode())
            return
        if "meta_info" in obj:  # native /generate: cumulative text
            meta = obj["meta_info"]
            self.text = obj.get("text", self.text)
            self.prompt_tokens = meta.get("prompt_tokens", self.prompt_tokens)
            self.completion_tokens = meta.get("completion_tokens", self.completion_tokens)
            fr = meta.get("finish_reason")
            if fr:
                self.finish = fr
                if fr.get("type") == "abort":
                    self.error = str(fr.get("message", "abort"))
            return
        usage = obj.get("usage") or {}
        self.prompt_tokens = usage.get("prompt_tokens", self.prompt_tokens)
        self.completion_tokens = usage.get("completion_tokens", self.completion_tokens)
        for ch in obj.get("choices") or ():
            piece = (ch.get("delta") or {}).get("content") if delta else (ch.get("message") or {}).get("content")
            piece = piece if piece is not None else ch.get("text")
            if piece:
                self.text = self.text + piece if delta else piece
            if ch.get("finish_reason"):
                self.finish = ch["finish_reason"]
                if ch["finish_reason"] == "abort":
                    self.error = "finish_reason abort"

    def outcome(self, *, stream: bool) -> Outcome:
        if self.error:
            return Outcome.CLEAN_ERROR
        if self.finish is None or (stream and not self.done):
            return Outcome.TRUNCATED
        return Outcome.OK


class Client:
    """One agent's keep-alive connection to the target, recording into the history."""

    _ids = itertools.count(1)

    def __init__(self, base_url: str, history: History, deadlines: Deadlines) -> None:
        self.history, self.deadlines = history, deadlines
        d = deadlines
        self._http = httpx.Client(base_url=base_url, limits=httpx.Limits(max_connections=1, max_keepalive_connections=1), timeout=httpx.Timeout(d.read_s, connect=d.connect_s, pool=d.connect_s, write=d.connect_s))

    def close(self) -> None:
        self._http.close()

    def request(self, path: str, body: dict[str, Any], *, agent: str = "", round: int = -1, phase: str = "", hang_up_after: int | None = None) -> Reply:
        """Send one request and record it. ``hang_up_after=N`` closes a stream after N data
        events on purpose (a client abort); that ends as ``client_timeout``, the client's own
        decision to stop waiting."""
        op = f"op{next(self._ids)}"
        stream = bool(body.get("stream"))
        context = hashlib.blake2b(json.dumps({k: v for k, v in body.items() if k != "stream"}, sort_keys=True).encode(), digest_size=8).hexdigest()
        self.history.append(Invoke(self.history.now(), time.time(), op, path, stream, agent, round, context, phase))
        reply, first_byte = self._run(op, path, body, stream, hang_up_after)
        self.history.append(
            Complete(self.history.now(), time.time(), op, reply.outcome, reply.status, reply.error, reply.text, reply.prompt_tokens, reply.completion_tokens, first_byte)
        )
        return reply

    def _run(self, op: str, path: str, body: dict[str, Any], stream: bool, hang_up_after: int | None = None) -> tuple[Reply, float | None]:
        d = self.deadlines
        got_head = False
        first_byte: float | None = None
        expired = threading.Event()
        parse = _Parse()
        # The total deadline counts from the send. Until the head arrives there is no response
        # to close, and waiting for it is one read: a read bound no longer than total_s holds
        # it (a head trickled a byte at a time could outlast it; no server we test does that).
        read_s = min(d.stall_s if stream else d.read_s, d.total_s)
        timeout = httpx.Timeout(read_s, connect=min(d.connect_s, d.total_s), pool=d.connect_s, write=d.connect_s)
        sent = time.monotonic()
        try:
            with self._http.stream("POST", path, json=body, timeout=timeout, headers=trace_headers(op)) as resp:
                got_head = True
                timer = threading.Timer(max(0.0, d.total_s - (time.monotonic() - sent)), lambda: (expired.set(), resp.close()))
                timer.daemon = True
                timer.start()
                try:
                    if resp.status_code >= 400:
                        raw = resp.read()
                        return Reply(op, Outcome.CLEAN_ERROR, resp.status_code, error=_error_text(raw)), self.history.now()
                    if not stream:
                        raw = resp.read()
                        first_byte = self.history.now()
                        parse.event(json.loads(raw), delta=False)
                        return self._reply(op, resp.status_code, parse, stream=False), first_byte
                    events = 0
                    for line in resp.iter_lines():
                        now = self.history.now()
                        first_byte = first_byte if first_byte is not None else now
                        self.history.append(Chunk(now, op, len(line)))
                        if not line.startswith("data: "):
                            continue
                        events += 1
                        if hang_up_after is not None and events >= hang_up_after:
                            return Reply(op, Outcome.CLIENT_TIMEOUT, resp.status_code, parse.text, f"client hung up after {events} events"), first_byte
                        data = line[6:]
                        if data == "[DONE]":
                            parse.done = True
                            break
                        parse.event(json.loads(data), delta=True)
                    return self._reply(op, resp.status_code, parse, stream=True), first_byte
                finally:
                    timer.cancel()
        except (httpx.HTTPError, ValueError) as exc:
            if expired.is_set() or (not got_head and isinstance(exc, httpx.ReadTimeout) and read_s == d.total_s):
                return Reply(op, Outcome.CLIENT_TIMEOUT, error=f"total deadline {d.total_s:g}s"), first_byte
            if isinstance(exc, ValueError):
                return Reply(op, Outcome.TRUNCATED, error=f"unparseable body: {exc}"), first_byte
            outcome = classify_exception(exc, got_head=got_head, stream=stream)
            return Reply(op, outcome, error=f"{type(exc).__name__}: {exc}"), first_byte

    @staticmethod
    def _reply(op: str, status: int, parse: _Parse, *, stream: bool) -> Reply:
        return Reply(op, parse.outcome(stream=stream), status, parse.text, parse.error, parse.prompt_tokens, parse.completion_tokens)


class _Background:
    """Daemon threads, one per named job: an interrupted run never waits for its agents
    at exit (ThreadPoolExecutor's workers would hold the interpreter open)."""

    def __init__(self, jobs: dict[str, Callable[[], Any]]) -> None:
        self._results: dict[str, Any] = {}
        self._errors: dict[str, BaseException] = {}
        self._threads = [threading.Thread(target=self._run, args=(name, fn), name=name, daemon=True) for name, fn in jobs.items()]
        for t in self._threads:
            t.start()

    def _run(self, name: str, fn: Callable[[], Any]) -> None:
        try:
            self._results[name] = fn()
        except BaseException as exc:  # handed to join(), which re-raises it
            self._errors[name] = exc

    def join(self, timeout_s: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        for t in self._threads:
            t.join(max(0.0, deadline - time.monotonic()))
        late = [t.name for t in self._threads if t.is_alive()]
        if late:
            raise TimeoutError(f"{', '.join(late)} still running after {timeout_s:g}s")
        if self._errors:
            raise next(iter(self._errors.values()))
        return {t.name: self._results[t.name] for t in self._threads}


@dataclass
class Conversation:
    """``agents`` agents in parallel, ``rounds`` rounds each, growing context, keep-alive."""

    workload: "Workload"
    agents: int
    rounds: int
    deadlines: Deadlines
    stream: bool = True
    max_tokens: int = 8
    words_per_round: int = 60
    retries: int = 0
    retry_wait_s: float = 0.5
    retry_on: frozenset[Outcome] = frozenset({Outcome.CLEAN_ERROR})
    phase: str = ""
    replies: dict[str, list[Reply]] = field(default_factory=dict)

    def start(self) -> "Conversation":
        """Start every agent in the background; ``join`` waits for them."""
        self._runner = _Background({f"agent{i}": (lambda name=f"agent{i}": self._agent(name)) for i in range(self.agents)})
        return self

    def join(self) -> dict[str, list[Reply]]:
        """Wait for every agent; bounded, since each request is bounded by its deadlines."""
        self.replies = self._runner.join(self.rounds * (self.retries + 1) * (self.deadlines.total_s + 1) + 5)
        return self.replies

    def run(self) -> dict[str, list[Reply]]:
        return self.start().join()

    def _agent(self, name: str) -> list[Reply]:
        rng = random.Random(f"{self.workload.seed}:{name}")
        client = Client(self.workload.base_url, self.workload.history, self.deadlines)
        messages: list[dict[str, str]] = [{"role": "system", "content": f"You are {name}."}]
        out: list[Reply] = []
        try:
            for rnd in range(self.rounds):
                text = " ".join(rng.choice(WORDS) for _ in range(self.words_per_round))
                messages.append({"role": "user", "content": f"round {rnd}: {text}"})
                body = self.workload.chat(messages, max_tokens=self.max_tokens, ignore_eos=True, stream=self.stream)
                if self.stream:
                    body["stream_options"] = {"include_usage": True}
                retry = Retrying(stop=stop_after_attempt(self.retries + 1), wait=wait_fixed(self.retry_wait_s), retry=retry_if_result(lambda r: r.outcome in self.retry_on))
                try:
                    reply = retry(client.request, "/v1/chat/completions", body, agent=name, round=rnd, phase=self.phase)
                except RetryError as gave_up:  # retries only on `retry_on` (clean errors by default)
                    reply = gave_up.last_attempt.result()
                out.append(reply)
                if not reply.ok:
                    break  # the harness gives up this conversation
                messages.append({"role": "assistant", "content": reply.text})
        finally:
            client.close()
        return out


@dataclass
class Workload:
    """The ``workload`` fixture: requests and conversations against the target's client URL."""

    base_url: str
    history: History
    seed: int
    model: str
    deadlines: Deadlines = field(default_factory=Deadlines)

    def conversations(self, *, agents: int, rounds: int, deadlines: Deadlines | None = None, **kw: Any) -> Conversation:
        return Conversation(self, agents, rounds, deadlines or self.deadlines, **kw)

    def chat(self, messages: str | list[dict[str, str]], *, max_tokens: int, **extra: Any) -> dict[str, Any]:
        """A chat-completions body for the target's model, decoded greedily (temperature 0):
        a reply is then a function of its context on a real engine too, so it can be held
        against a baseline. ``messages`` may be one user message's text."""
        if isinstance(messages, str):
            messages = [{"role": "user", "content": messages}]
        return {"model": self.model, "messages": list(messages), "max_tokens": max_tokens, "temperature": 0, **extra}

    def request(self, path: str, body: dict[str, Any], *, phase: str = "", deadlines: Deadlines | None = None) -> Reply:
        client = Client(self.base_url, self.history, deadlines or self.deadlines)
        try:
            return client.request(path, body, phase=phase)
        finally:
            client.close()

    def abort_storm(self, n: int, *, after_events: int = 2, max_tokens: int = 200, phase: str = "") -> list[Reply]:
        """``n`` streams at once, each hung up by its client after ``after_events`` events."""
        def one(i: int) -> Reply:
            client = Client(self.base_url, self.history, self.deadlines)
            try:
                body = self.chat(f"a long story {i}", max_tokens=max_tokens, ignore_eos=True, stream=True)
                return client.request("/v1/chat/completions", body, phase=phase, hang_up_after=after_events)
            finally:
                client.close()

        done = _Background({str(i): (lambda i=i: one(i)) for i in range(n)}).join(self.deadlines.total_s + 5)
        return [done[str(i)] for i in range(n)]

    def probe_until_ok(self, *, within_s: float, interval_s: float = 0.25) -> Reply:
        """Fresh short requests (phase "probe") until one succeeds or ``within_s`` passes."""
        body = self.chat("recovery probe", max_tokens=2)
        short = Deadlines(connect_s=1.0, read_s=min(5.0, within_s), stall_s=2.0, total_s=min(5.0, within_s))
        retry = Retrying(stop=stop_after_delay(within_s), wait=wait_fixed(interval_s), retry=retry_if_result(lambda r: not r.ok))
        try:
            return retry(self.request, "/v1/chat/completions", body, phase="probe", deadlines=short)
        except RetryError as gave_up:
            return gave_up.last_attempt.result()
