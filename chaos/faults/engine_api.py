"""Faults made through an engine's own API: ``/abort_request`` with ``abort_all``, as an
operator (or an engine-side abort) ends every request an engine holds at once;
``/flush_cache``, as an operator drops what an engine caches across requests; and pdsim's
test hook that flips bytes of the KV its prefill sends (``/pdsim/kv_corruption``)."""

from __future__ import annotations

from typing import Any, ClassVar

import httpx

from chaos.errors import FaultNotApplied, FaultNotHealed
from chaos.faults.base import Fault
from chaos.system.wait import HTTP_CALL_S
from chaos.targets.base import Target

__all__ = ["AbortAll", "CacheFlush", "SenderCorrupt"]


class _EngineCall(Fault):
    """One call to an engine's own API (``POST path`` with ``body``), verified by the answer:
    a status in ``ANSWERS`` (told as its words), any other a ``FaultNotApplied``. There is
    nothing to heal: a call is a moment."""

    path: str
    body: ClassVar[dict[str, Any] | None] = None
    ANSWERS: ClassVar[dict[int, str]]

    def __init__(self, target: Target, service: str) -> None:
        self.target, self.service = target, service
        self._status: int | None = None

    def inject(self) -> None:
        reply = httpx.post(
            f"{self.target.info.endpoints[self.service]}{self.path}", json=self.body, timeout=HTTP_CALL_S
        )
        self._status = reply.status_code

    def verify(self) -> str:
        if self._status not in self.ANSWERS:
            raise FaultNotApplied(f"{self.service} answered {self._status} to {self.path}")
        return f"{self.service} answered {self._status} to {self.path}{self.ANSWERS[self._status]}"

    def heal(self) -> None:
        """Nothing to undo."""


class AbortAll(_EngineCall):
    """Every request one engine holds is aborted (SGLang's ``/abort_request``, ``abort_all``)."""

    kind = "abort_all"
    path = "/abort_request"
    body: ClassVar[dict[str, Any] | None] = {"rid": "", "abort_all": True}
    ANSWERS: ClassVar[dict[int, str]] = {200: " abort_all"}

    @property
    def implicates(self) -> tuple[str, ...]:
        return (self.service,)

    def describe(self) -> str:
        return f"abort every request on {self.service}"

    def verify_healed(self) -> str:
        return "an abort is momentary"


class CacheFlush(_EngineCall):
    """One engine asked once to drop what it caches across requests (``/flush_cache``), as an
    operator does after a weight update. SGLang flushes only an idle engine and refuses with
    a 400 while it holds requests (pdsim the same): either answer is the engine's to give,
    and what follows is judged (an engine that flushed under running requests would free KV
    they still use). It implicates no service: a flush may fail no request and charge no
    breaker."""

    kind = "flush_cache"
    path = "/flush_cache"
    ANSWERS: ClassVar[dict[int, str]] = {200: ": flushed", 400: ": refused (busy)"}

    @property
    def implicates(self) -> tuple[str, ...]:
        return ()

    def describe(self) -> str:
        return f"flush the cache of {self.service}"

    def verify_healed(self) -> str:
        return "a flush is momentary"


class SenderCorrupt(Fault):
    """At ``prob``, one byte flipped in each KV chunk pdsim's prefill sends, after its KV
    checksum was taken (``pdsim.kvcheck``): what a link that corrupts bytes past TCP's
    checksum does to the KV, on a stack whose links are Toxiproxy's, which cannot rewrite
    bytes. Counts the bytes it flipped (``figures``: ``corrupted``)."""

    kind = "corrupt"
    HOOK = "/pdsim/kv_corruption"

    def __init__(self, target: Target, prob: float) -> None:
        if not 0 < prob <= 1:
            raise ValueError(f"a corruption's chance is in (0, 1], not {prob}")
        self.target, self.prob = target, prob
        self._before: int | None = None  # bytes the hook had flipped when this fault began
        self._corrupted = 0

    @property
    def implicates(self) -> tuple[str, ...]:
        return ("prefill", "decode")  # the KV between them: either end may fail the room

    @property
    def figures(self) -> dict[str, Any]:
        return {"corrupted": self._corrupted}

    def describe(self) -> str:
        return f"corrupt a byte of {self.prob:.0%} of the KV chunks prefill sends (pdsim's sender)"

    def _hook(self, prob: float | None = None) -> dict[str, Any]:
        url = self.target.info.endpoints["prefill"] + self.HOOK
        try:
            reply = (
                httpx.post(url, json={"prob": prob}, timeout=HTTP_CALL_S)
                if prob is not None
                else httpx.get(url, timeout=HTTP_CALL_S)
            )
            reply.raise_for_status()
            told: dict[str, Any] = reply.json()
        except (httpx.HTTPError, ValueError) as exc:
            raise FaultNotApplied(f"prefill's {self.HOOK}: {exc}") from exc
        return told

    def inject(self) -> None:
        self._before = int(self._hook(self.prob)["corrupted"])

    def verify(self) -> str:
        told = self._hook()
        if told["prob"] != self.prob:
            raise FaultNotApplied(f"prefill corrupts at {told['prob']}, not {self.prob}")
        return f"prefill corrupts {self.prob:.0%} of its KV chunks"

    def heal(self) -> None:
        told = self._hook(0.0)
        self._corrupted = int(told["corrupted"]) - (self._before or 0)

    def verify_healed(self) -> str:
        told = self._hook()
        if told["prob"] != 0:
            raise FaultNotHealed(f"prefill still corrupts at {told['prob']}")
        return f"prefill corrupts nothing; {self._corrupted} bytes flipped"
