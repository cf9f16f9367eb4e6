"""What prefill and decode engines share: admission, the scheduler loop, KV pool and exits.

Each engine is one asyncio process. Its scheduler loop runs every ``tick_s`` (and at once
when a request arrives) and checks its timeouts on every iteration, idle or not, as the
SGLang scheduler's event loop does; the ``idle_watchdog`` defect checks them only on
iterations that follow an arrival.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from abc import ABC, abstractmethod
from collections.abc import Coroutine
from typing import Any

from pdsim.config import EngineConfig, Mode
from pdsim.metrics import EngineMetrics
from pdsim.reqlog import log_event
from pdsim.request import BadRequest, Req, Update

__all__ = ["Engine"]

_DRAIN_CHECK_S = 1.0  # how often a draining engine looks whether its requests are done (SGLang: 5 s)


class Engine(ABC):
    """Admission and bookkeeping; subclasses own the queues and the protocol."""

    mode_name: str = ""

    def __init__(self, cfg: EngineConfig) -> None:
        self.cfg = cfg
        self.metrics = EngineMetrics(cfg.model, self.mode_name)
        self.reqs: dict[str, Req] = {}
        self.used_tokens = 0
        self.last_tick = time.monotonic()
        self.draining = False  # SIGTERM came: /health says 503 while the requests taken finish
        self._arrivals = 0
        self._wake = asyncio.Event()
        self._tasks: set[asyncio.Task[None]] = set()
        self._tokens_window: list[tuple[float, int]] = []

    # ---- lifecycle -------------------------------------------------------------------
    async def start(self) -> None:
        self.spawn(self._loop())

    async def stop(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(BaseException):
                await task

    async def drain(self, *, timeout_s: float) -> bool:
        """SGLang's SIGTERM (``sigterm_watchdog``): /health answers 503 from now on, the
        requests already taken run to their end, then the engine may stop. The first look
        comes a check period after the signal, so a readiness probe sees the 503 even on an
        idle engine; ``timeout_s`` bounds the wait (SGLang has none). True if drained."""
        self.draining = True
        deadline = time.monotonic() + timeout_s
        while True:
            await asyncio.sleep(_DRAIN_CHECK_S)
            if not self.reqs or time.monotonic() >= deadline:
                return not self.reqs

    def spawn(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        """Keep a strong reference to background tasks (asyncio only holds weak ones)."""
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _loop(self) -> None:
        while True:
            now = time.monotonic()
            self.last_tick = now
            check = self._arrivals > 0 or self.cfg.behaviour.timeouts_checked_while_idle
            self._arrivals = 0
            self.tick(now, check_timeouts=check)
            self._publish_metrics(now)
            self._wake.clear()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.cfg.tick_s)

    def wake(self) -> None:
        self._wake.set()

    # ---- admission ---------------------------------------------------------------------
    def submit(self, req: Req) -> None:
        """Validate as SGLang's scheduler does, then hand the request to the mode's queue."""
        if req.room is None:
            raise BadRequest(
                f"Invalid request: Disaggregated request received without bootstrap room id. req.rid={req.rid!r}"
            )
        if req.rid in self.reqs:
            raise BadRequest(f"Duplicate request id {req.rid}")
        self.reqs[req.rid] = req
        self._arrivals += 1
        log_event(
            "req",
            rid=req.rid,
            bootstrap_room=req.room,
            state="received",
            prompt_tokens=req.prompt_tokens,
            xrid=req.client_id,
        )
        self.enqueue(req)
        self.wake()

    def abort_matching(self, rid_prefix: str, abort_all: bool) -> int:
        """``/abort_request``: prefix match on rid, as SGLang does; an empty rid without
        ``abort_all`` matches nothing (SGLang 0.5.23 ``TokenizerManager.abort_request``
        ignores it: it would prefix-match every request)."""
        if not rid_prefix and not abort_all:
            return 0
        victims = [r for r in self.reqs.values() if abort_all or r.rid.startswith(rid_prefix)]
        for req in victims:
            self.abort(req, "Aborted by AbortReq.")
        return len(victims)

    def abort(self, req: Req, reason: str) -> None:
        """A client disconnect or an abort request: free everything the request holds."""
        if req.rid not in self.reqs or req.aborted:
            return
        req.aborted = True
        self.metrics.aborted()
        if not self.cfg.behaviour.abort_releases:
            req.leaked = True  # stays in its queue and keeps its KV: the leak
            log_event("req", rid=req.rid, bootstrap_room=req.room, state="abort_leaked", reason=reason)
            return
        ending = self.abort_ending(req, reason)  # before the release: where it stands decides how it ends
        self.release(req, reason)
        self.reqs.pop(req.rid, None)
        log_event("req", rid=req.rid, bootstrap_room=req.room, state="aborted", reason=reason)
        req.push(ending)
        self.wake()

    def flush_cache(self) -> None:  # noqa: B027 (a default, not a duty: prefill caches nothing)
        """``/flush_cache`` on an idle engine: drop what it caches across requests (the
        decode radix cache; prefill caches nothing across requests here)."""

    def abort_ending(self, req: Req, reason: str) -> Update:
        """How an aborted request ends for its client: a status-500 failure, as SGLang's PD
        engines fail a queued room they abort (through its KV sender or receiver)."""
        return Update("error", 500, reason)

    # ---- exits ---------------------------------------------------------------------------
    def finish_ok(self, req: Req) -> None:
        self.reqs.pop(req.rid, None)
        now = time.monotonic()
        self.metrics.finished(
            streaming=req.stream,
            prompt=req.prompt_tokens,
            generated=len(req.output_ids),
            # SGLang's PD prefill never observes TTFT: its first token is decode's to report
            ttft_s=(req.first_token_at - req.arrival) if req.first_token_at and self.cfg.mode is Mode.DECODE else None,
            e2e_s=now - req.arrival,
        )
        # cached_tokens: the prompt's tokens served from a cache here (decode's radix cache; pdsim's prefill has none), as SGLang's Finish line says
        cached = req.decode_prefix_len if self.cfg.mode is Mode.DECODE else 0
        log_event(
            "req",
            rid=req.rid,
            bootstrap_room=req.room,
            state="finished",
            finish=(req.finish or {}).get("type"),
            completion_tokens=len(req.output_ids),
            cached_tokens=cached,
        )
        req.push(Update("finish"))

    def finish_error(self, req: Req, status: int, message: str) -> None:
        self.reqs.pop(req.rid, None)
        log_event("req", rid=req.rid, bootstrap_room=req.room, state="failed", status=status, error=message)
        req.push(Update("error", status, message))

    def note_tokens(self, now: float, n: int) -> None:
        self._tokens_window.append((now, n))

    def _publish_metrics(self, now: float) -> None:
        self._tokens_window = [(t, n) for t, n in self._tokens_window if now - t < 1.0]
        self.publish(now, gen_throughput=float(sum(n for _, n in self._tokens_window)))

    def alloc(self, tokens: int) -> None:
        self.used_tokens += tokens

    def free(self, tokens: int) -> None:
        self.used_tokens = max(0, self.used_tokens - tokens)

    # ---- mode hooks ----------------------------------------------------------------------
    @abstractmethod
    def enqueue(self, req: Req) -> None: ...

    @abstractmethod
    def tick(self, now: float, *, check_timeouts: bool) -> None: ...

    @abstractmethod
    def release(self, req: Req, reason: str) -> None:
        """Remove an aborted request from every queue and free its KV."""

    @abstractmethod
    def publish(self, now: float, *, gen_throughput: float) -> None: ...

    @abstractmethod
    def loads(self) -> dict[str, int]:
        """Counts for ``/v1/loads``: running, waiting, total, and this side's PD queues
        (``<queue>_reqs``, its disaggregation section), read at the moment of the call."""

    @abstractmethod
    def is_idle(self) -> bool: ...
