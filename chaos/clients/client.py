"""The rig's HTTP client (httpx): one request at a time over one keep-alive connection,
recorded into the history as an ``Invoke`` and the ``Complete`` it returns.

Every request has a client deadline: connect, read (until the response head; for a
non-stream request that is the whole reply), stall (the longest silence inside an open
stream) and total (from the send, enforced by a timer that closes the response, so no read
can outlive it). Each request ends as exactly one ``Outcome``; ``classify_exception`` is the
one place where httpx's errors become outcomes. Replies of the three endpoints (chat,
completions, SGLang's native ``/generate``), JSON or SSE, are parsed by ``_Parse``.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import httpx

from chaos.observe.history import History
from chaos.observe.records import Chunk, Complete, Invoke, Outcome, Phase
from chaos.system.limits import waiting

__all__ = [
    "CLOSE_S",
    "Client",
    "Deadlines",
    "HangUp",
    "classify_exception",
    "context_of",
    "ending",
    "error_text",
    "total_deadline",
    "trace_headers",
]

CLOSE_S = 1.0  # from a deadline's expiry to the request's record: closing the response, joining the thread

# When a streaming client hangs up on purpose: after this many data events, or at the first
# event once this event is set (a scenario ends streams it no longer needs, whatever their length)
HangUp = int | threading.Event


def _hangs_up(when: HangUp, events: int) -> bool:
    return when.is_set() if isinstance(when, threading.Event) else events >= when


def trace_headers(op: str) -> dict[str, str]:
    """What lets the reports follow a request into the logs (``chaos.observe.logs``): smg
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

    @property
    def ends_within_s(self) -> float:
        """The latest a request under these deadlines is recorded as complete, from its send."""
        return self.total_s + CLOSE_S


def asked_of(body: dict[str, Any]) -> dict[str, Any]:
    """What a request body asks about its reply's end, as ``Invoke``'s fields: the OpenAI
    endpoints' ``max_tokens`` (or ``max_completion_tokens``), SGLang's native
    ``sampling_params.max_new_tokens``; ``ignore_eos``; a ``stop`` or ``stop_token_ids``."""
    params = body.get("sampling_params") or body
    limit = params.get("max_new_tokens", params.get("max_tokens", params.get("max_completion_tokens")))
    return dict(
        max_tokens=limit if isinstance(limit, int) else None,
        ignore_eos=bool(params.get("ignore_eos")),
        stops=bool(params.get("stop") or params.get("stop_token_ids")),
    )


# what a request says that does not decide its reply: how it is sent back, and the PD fields
# a router sets (or a client playing one) to pair its legs
_NOT_CONTEXT = frozenset({"stream", "bootstrap_host", "bootstrap_port", "bootstrap_room"})


def context_of(request: dict[str, Any]) -> str:
    """A digest of everything a request says that decides its reply: equal contexts must
    get equal replies (``replies_match_baseline``), whether sent through the router or to
    the engines with PD fields of the client's choosing."""
    decides = {k: v for k, v in request.items() if k not in _NOT_CONTEXT}
    return hashlib.blake2b(json.dumps(decides, sort_keys=True).encode(), digest_size=8).hexdigest()


@contextmanager
def total_deadline(
    total_s: float, sent: float, close: Callable[[], object], expired: threading.Event
) -> Iterator[None]:
    """While inside: once ``total_s`` has passed since ``sent`` (monotonic), set ``expired``
    and ``close`` the response, so that no read can outlive the request's total deadline."""

    def expire() -> None:
        expired.set()
        close()

    timer = threading.Timer(max(0.0, total_s - (time.monotonic() - sent)), expire)
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()


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


def error_text(raw: bytes) -> str:
    """What an error answer says: its JSON's message (OpenAI's ``error.message``, or the
    whole object), else the text itself."""
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
            self.error = error_text(json.dumps(obj).encode())
            return
        if "meta_info" in obj:  # native /generate: cumulative text
            meta = obj["meta_info"]
            self.text = obj.get("text", self.text)
            self.prompt_tokens = meta.get("prompt_tokens", self.prompt_tokens)
            self.completion_tokens = meta.get("completion_tokens", self.completion_tokens)
            fr = meta.get("finish_reason")
            if fr:
                self.finish = fr.get("type", "")
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

    def end(self, status: int, *, stream: bool) -> dict[str, Any]:
        return ending(
            self.outcome(stream=stream),
            status,
            self.text,
            self.error,
            self.prompt_tokens,
            self.completion_tokens,
            finish=str(self.finish or ""),
        )


def ending(
    outcome: Outcome,
    status: int | None = None,
    reply: str = "",
    error: str = "",
    prompt_tokens: int | None = None,
    completion_tokens: int | None = None,
    *,
    finish: str = "",
    retry_after: str | None = None,
) -> dict[str, Any]:
    """A request's ending, as ``Complete``'s fields."""
    return dict(
        outcome=outcome,
        status=status,
        reply=reply,
        error=error,
        prompt_tokens=prompt_tokens,
        completion_tokens=completion_tokens,
        finish=finish,
        retry_after=retry_after,
    )


# One TLS context for every client: building one loads the CA bundle (about 17 ms of CPU
# under the GIL, far more beside busy engines), which spread bursts of "simultaneous"
# requests over seconds on a loaded machine. The targets speak plain HTTP; an https
# endpoint is still verified.
_TLS = httpx.create_ssl_context()


class Client:
    """One agent's keep-alive connection to the target, recording into the history."""

    _ids = itertools.count(1)

    def __init__(self, base_url: str, history: History, deadlines: Deadlines) -> None:
        self.history, self.deadlines = history, deadlines
        d = deadlines
        self._http = httpx.Client(
            base_url=base_url,
            verify=_TLS,
            limits=httpx.Limits(max_connections=1, max_keepalive_connections=1),
            timeout=httpx.Timeout(d.read_s, connect=d.connect_s, pool=d.connect_s, write=d.connect_s),
        )

    def close(self) -> None:
        self._http.close()

    def request(
        self,
        path: str,
        body: dict[str, Any],
        *,
        agent: str = "",
        round: int = -1,
        phase: Phase = Phase.DERIVED,
        workload: str = "",
        hang_up_after: HangUp | None = None,
        invalid: str = "",
        content: bytes | None = None,
    ) -> Complete:
        """Send one request, record it, and return how it ended (the history's record).
        ``invalid`` says why the request is the client's own error, where it is one.
        ``content``: the bytes sent as the JSON body instead of ``body``'s encoding (a
        malformed body); ``body`` then says what it asks, for the record.
        ``hang_up_after`` closes a stream on purpose (a client abort): after N data events,
        or at the first event once an ``Event`` is set. That ends as ``hung_up``, the
        client's own decision, not a failure."""
        op = f"op{next(self._ids)}"
        stream = bool(body.get("stream"))
        context = context_of(body)
        self.history.append(
            Invoke(
                self.history.now(),
                time.time(),
                op,
                path,
                stream,
                agent,
                round,
                context,
                phase,
                workload,
                **asked_of(body),
                invalid=invalid,
            )
        )
        with waiting(f"{op} {path} to end (its client deadline)", self.deadlines.ends_within_s):
            end, first_byte = self._run(op, path, body, stream, hang_up_after, content)
        return self.history.append(Complete(self.history.now(), time.time(), op, first_byte_t=first_byte, **end))

    def _run(
        self,
        op: str,
        path: str,
        body: dict[str, Any],
        stream: bool,
        hang_up_after: HangUp | None = None,
        content: bytes | None = None,
    ) -> tuple[dict[str, Any], float | None]:
        """How the request ended (``Complete``'s fields) and when its first byte came."""
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
        payload: dict[str, Any] = {"json": body} if content is None else {"content": content}
        headers = trace_headers(op) | ({} if content is None else {"content-type": "application/json"})
        try:
            with self._http.stream("POST", path, timeout=timeout, headers=headers, **payload) as resp:
                got_head = True
                with total_deadline(d.total_s, sent, resp.close, expired):
                    if resp.status_code >= 400:
                        raw = resp.read()
                        return ending(
                            Outcome.CLEAN_ERROR,
                            resp.status_code,
                            error=error_text(raw),
                            retry_after=resp.headers.get("retry-after"),
                        ), self.history.now()
                    if not stream:
                        raw = resp.read()
                        first_byte = self.history.now()
                        parse.event(json.loads(raw), delta=False)
                        return parse.end(resp.status_code, stream=False), first_byte
                    events = 0
                    for line in resp.iter_lines():
                        now = self.history.now()
                        first_byte = first_byte if first_byte is not None else now
                        self.history.append(Chunk(now, op, len(line)))
                        if not line.startswith("data: "):
                            continue
                        events += 1
                        if hang_up_after is not None and _hangs_up(hang_up_after, events):
                            return ending(
                                Outcome.HUNG_UP,
                                resp.status_code,
                                parse.text,
                                f"client hung up after {events} events",
                            ), first_byte
                        data = line[6:]
                        if data == "[DONE]":
                            parse.done = True
                            break
                        parse.event(json.loads(data), delta=True)
                    return parse.end(resp.status_code, stream=True), first_byte
        except (httpx.HTTPError, httpx.StreamError, ValueError) as exc:
            # StreamError: the total deadline closed the response before a read began (not an HTTPError)
            if expired.is_set() or (not got_head and isinstance(exc, httpx.ReadTimeout) and read_s == d.total_s):
                return ending(Outcome.CLIENT_TIMEOUT, error=f"total deadline {d.total_s:g}s"), first_byte
            if isinstance(exc, ValueError):
                return ending(Outcome.TRUNCATED, error=f"unparseable body: {exc}"), first_byte
            outcome = classify_exception(exc, got_head=got_head, stream=stream)
            return ending(outcome, error=f"{type(exc).__name__}: {exc}"), first_byte
