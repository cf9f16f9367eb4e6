"""The official ``openai`` Python client as a workload client, so that "a real client
copes" is tested and not assumed.

Each request is recorded as the rig's own client records one (``chaos.clients.client``): an
``Invoke``, a ``Chunk`` per stream event, and a ``Complete`` with exactly one outcome, here
classified from what the openai client raised or returned. Its own retries are off (the
scenario decides about retrying) and every deadline of ``Deadlines`` holds: connect and
read through the client's timeout, total by a timer that closes the response.
"""

from __future__ import annotations

import itertools
import threading
import time
from typing import Any

import openai

from chaos.clients.client import Deadlines, context_of, ending, total_deadline, trace_headers
from chaos.observe.history import History
from chaos.observe.records import Chunk, Complete, Invoke, Outcome, Phase

__all__ = ["OpenAIClient", "classify_openai"]

PATH = "/v1/chat/completions"


def classify_openai(exc: Exception, *, got_chunk: bool) -> Outcome:
    """The outcome an openai client exception means (before or after the first chunk)."""
    if isinstance(exc, openai.APITimeoutError):
        return Outcome.STALLED if got_chunk else Outcome.CLIENT_TIMEOUT
    if isinstance(exc, openai.APIStatusError):
        return Outcome.CLEAN_ERROR
    if isinstance(exc, openai.APIConnectionError):
        return Outcome.TRUNCATED if got_chunk else Outcome.CONNECTION_ERROR
    if isinstance(exc, openai.APIError):  # an error event inside a stream: parseable, so clean
        return Outcome.CLEAN_ERROR
    return Outcome.TRUNCATED if got_chunk else Outcome.CONNECTION_ERROR


class OpenAIClient:
    """One ``openai.OpenAI`` against the target's client URL, recording into the history."""

    _ids = itertools.count(1)

    def __init__(self, base_url: str, history: History, deadlines: Deadlines, *, model: str) -> None:
        self.history, self.deadlines, self.model = history, deadlines, model
        d = deadlines
        timeout = openai.Timeout(
            min(d.read_s, d.total_s), connect=min(d.connect_s, d.total_s), pool=d.connect_s, write=d.connect_s
        )
        self._client = openai.OpenAI(base_url=f"{base_url}/v1", api_key="pd-chaos", timeout=timeout, max_retries=0)

    def close(self) -> None:
        self._client.close()

    def chat(
        self, text: str, *, max_tokens: int, stream: bool, phase: Phase = Phase.DERIVED, workload: str = ""
    ) -> Complete:
        """One chat completion, greedy and to ``max_tokens`` (SGLang's ``ignore_eos``);
        recorded and returned as its ``Complete``."""
        op = f"oa{next(self._ids)}"
        messages = [{"role": "user", "content": text}]
        context = context_of({"messages": messages, "max_tokens": max_tokens, "client": "openai"})
        self.history.append(
            Invoke(
                self.history.now(), time.time(), op, PATH, stream, "", -1, context, phase, workload, max_tokens, True
            )
        )
        end, first_byte = self._run(op, messages, max_tokens, stream)
        return self.history.append(Complete(self.history.now(), time.time(), op, first_byte_t=first_byte, **end))

    def _run(
        self, op: str, messages: list[dict[str, str]], max_tokens: int, stream: bool
    ) -> tuple[dict[str, Any], float | None]:
        d = self.deadlines
        kw: dict[str, Any] = dict(
            model=self.model,
            messages=messages,
            max_tokens=max_tokens,
            temperature=0,
            extra_headers=trace_headers(op),
            extra_body={"ignore_eos": True},
        )
        text, finish, first_byte, usage = "", None, None, None
        expired = threading.Event()
        sent = time.monotonic()
        try:
            if not stream:
                reply = self._client.chat.completions.create(**kw)
                first_byte = self.history.now()
                choice = reply.choices[0]
                text, finish, usage = choice.message.content or "", choice.finish_reason, reply.usage
            else:
                events = self._client.chat.completions.create(**kw, stream=True, stream_options={"include_usage": True})
                with total_deadline(d.total_s, sent, events.close, expired):
                    for event in events:
                        first_byte = first_byte if first_byte is not None else self.history.now()
                        self.history.append(Chunk(self.history.now(), op, 1))
                        usage = event.usage or usage
                        for choice in event.choices:
                            text += choice.delta.content or ""
                            finish = choice.finish_reason or finish
        except Exception as exc:  # every openai or httpx error becomes exactly one outcome
            if expired.is_set():
                return _end(Outcome.CLIENT_TIMEOUT, error=f"total deadline {d.total_s:g}s", reply=text), first_byte
            status = getattr(exc, "status_code", None)
            response = getattr(exc, "response", None)  # an APIStatusError's answer
            return _end(
                classify_openai(exc, got_chunk=first_byte is not None),
                status=status,
                reply=text,
                error=f"{type(exc).__name__}: {exc}"[:500],
                retry_after=response.headers.get("retry-after") if response is not None else None,
            ), first_byte
        if expired.is_set():
            return _end(Outcome.CLIENT_TIMEOUT, error=f"total deadline {d.total_s:g}s", reply=text), first_byte
        if finish == "abort":  # SGLang ends an aborted stream with this finish reason: an error the client can see
            return _end(
                Outcome.CLEAN_ERROR, status=200, reply=text, usage=usage, error="finish_reason abort"
            ), first_byte
        if finish is None:  # a stream that ended without a finish
            return _end(
                Outcome.TRUNCATED, status=200, reply=text, usage=usage, error="ended without a finish_reason"
            ), first_byte
        return _end(Outcome.OK, status=200, reply=text, usage=usage, finish=finish), first_byte


def _end(
    outcome: Outcome,
    *,
    status: int | None = None,
    reply: str = "",
    error: str = "",
    usage: Any = None,
    finish: str | None = None,
    retry_after: str | None = None,
) -> dict[str, Any]:
    return ending(
        outcome,
        status,
        reply,
        error,
        getattr(usage, "prompt_tokens", None),
        getattr(usage, "completion_tokens", None),
        finish=finish or "",
        retry_after=retry_after,
    )
