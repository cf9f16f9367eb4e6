"""Faults made through an engine's own API: ``/abort_request`` with ``abort_all``, as an
operator (or an engine-side abort) ends every request an engine holds at once; and
``/flush_cache``, as an operator drops what an engine caches across requests."""

from __future__ import annotations

import httpx

from chaos.errors import FaultNotApplied
from chaos.faults.base import Fault
from chaos.targets.base import Target
from chaos.wait import HTTP_CALL_S

__all__ = ["AbortAll", "CacheFlush"]


class AbortAll(Fault):
    """Every request one engine holds is aborted (SGLang's ``/abort_request``, ``abort_all``).
    Verified by the engine's answer; there is nothing to heal: an abort is a moment."""

    kind = "abort_all"

    def __init__(self, target: Target, service: str) -> None:
        self.target, self.service = target, service
        self._status: int | None = None

    @property
    def implicates(self) -> tuple[str, ...]:
        return (self.service,)

    def describe(self) -> str:
        return f"abort every request on {self.service}"

    def inject(self) -> None:
        reply = httpx.post(
            f"{self.target.info.endpoints[self.service]}/abort_request",
            json={"rid": "", "abort_all": True},
            timeout=HTTP_CALL_S,
        )
        self._status = reply.status_code

    def verify(self) -> str:
        if self._status != 200:
            raise FaultNotApplied(f"{self.service} answered {self._status} to /abort_request")
        return f"{self.service} answered 200 to /abort_request abort_all"

    def heal(self) -> None:
        """Nothing to undo."""

    def verify_healed(self) -> str:
        return "an abort is momentary"


class CacheFlush(Fault):
    """One engine asked once to drop what it caches across requests (``/flush_cache``), as an
    operator does after a weight update. SGLang flushes only an idle engine and refuses with
    a 400 while it holds requests (pdsim the same): either answer is the engine's to give,
    and what follows is judged (an engine that flushed under running requests would free KV
    they still use). It implicates no service: a flush may fail no request and charge no
    breaker. Nothing to heal."""

    kind = "flush_cache"
    ANSWERS = {200: "flushed", 400: "refused (busy)"}

    def __init__(self, target: Target, service: str) -> None:
        self.target, self.service = target, service
        self._status: int | None = None

    @property
    def implicates(self) -> tuple[str, ...]:
        return ()

    def describe(self) -> str:
        return f"flush the cache of {self.service}"

    def inject(self) -> None:
        reply = httpx.post(f"{self.target.info.endpoints[self.service]}/flush_cache", timeout=HTTP_CALL_S)
        self._status = reply.status_code

    def verify(self) -> str:
        if self._status not in self.ANSWERS:
            raise FaultNotApplied(f"{self.service} answered {self._status} to /flush_cache")
        return f"{self.service} answered {self._status} to /flush_cache: {self.ANSWERS[self._status]}"

    def heal(self) -> None:
        """Nothing to undo."""

    def verify_healed(self) -> str:
        return "a flush is momentary"
