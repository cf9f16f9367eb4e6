"""The prefill engine: bootstrap queue, forward, inflight queue, KV sender.

Queue flow (SGLang's ``disaggregation/prefill.py``): a request waits in the bootstrap
queue until decode's metadata arrives on the control channel (KVPoll WaitingForInput),
runs its forward pass, then sits in the inflight queue while its KV bytes cross the kv
link to decode; decode's ACK on that link means Success. Only then is the prefill leg's
HTTP response sent.

Watchdogs, checked before the status merge on every loop iteration: the bootstrap timeout
(clock starts at arrival) and the inflight-queue watchdog (clock starts on entering the
inflight queue). A KV transfer itself has no timeout, as ``batch_transfer_sync`` has none:
only the watchdog frees a room whose transfer never completes.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
import zlib
from collections import deque

from pdsim.bootstrap import BootstrapServer
from pdsim.config import EngineConfig
from pdsim.engine import Engine
from pdsim.hooks import PollFailures
from pdsim.kvcheck import Corruption, pattern
from pdsim.kvpoll import KVPoll
from pdsim.model import context_digest, next_token
from pdsim.reqlog import log_event
from pdsim.request import Req
from pdsim.wire import read_frame, split_addr, write_frame

__all__ = ["PrefillEngine"]

_PENDING_META_TTL_S = 600.0
_KV_CONNECT_TIMEOUT_S = 5.0
# idle_transfer_stall: Mooncake 0.3.13.post1's TCP transport rejects the first transfer after
# about 5 s without one, and the consumer waits 60 to 90 s of a 300 s timeout (Mooncake#4209);
# here the transfer waits that share of decode's waiting timeout, then goes
_IDLE_GAP_S = 5.0
_IDLE_STALL_SHARE = 0.8


class PrefillEngine(Engine):
    mode_name = "prefill"

    def __init__(self, cfg: EngineConfig) -> None:
        super().__init__(cfg)
        self.instance_id = uuid.uuid4().hex
        self.bootstrap = BootstrapServer(page_size=cfg.page_size)
        self.bootstrap_queue: list[Req] = []
        self.waiting: deque[Req] = deque()
        self.forwarding: list[Req] = []
        self.inflight: list[Req] = []
        self.by_room: dict[int, Req] = {}
        self._pending_meta: dict[int, tuple[float, str, asyncio.StreamWriter, int]] = {}
        self._pending_abort: dict[int, float] = {}  # ABORTs that came before their request
        self._decode_link: dict[str, asyncio.StreamWriter] = {}
        self._kv_addr: dict[str, str] = {}
        # decode registrations: the decode instance at each kv address (SGLang's
        # decode_kv_args_table, keyed by the decode's session address and replaced when a
        # restarted decode registers again)
        self._decodes: dict[str, str] = {}
        self._transfers: dict[str, asyncio.Task[None]] = {}
        self._last_transfer = time.monotonic()  # when a transfer last began or ended
        self._control_server: asyncio.AbstractServer | None = None
        self.corruption = Corruption()  # the test hook that flips bytes of the KV it sends
        self.poll_failures = PollFailures(cfg.poll_failure_prob)  # SGLang's SGLANG_TEST_DISAGG_FAILURE_PROB

    async def start(self) -> None:
        # port 0: one the system picks, anew at each start, as SGLang picks its ZMQ port
        self._control_server = await asyncio.start_server(self._serve_control, self.cfg.host, self.cfg.control_port)
        bound = self._control_server.sockets[0].getsockname()[1]
        control = self.cfg.control_advertise or f"{self.cfg.host}:{bound}"
        rank_ip, rank_port = split_addr(control)
        # what SGLang's CommonKVManager.register_to_bootstrap PUTs to /route
        self.bootstrap.table[(0, 0, 0, 0)] = {
            "rank_ip": rank_ip,
            "rank_port": rank_port,
            "prefill_instance": self.instance_id,
        }
        self.bootstrap.http_port = self.cfg.port
        log_event(
            "engine",
            state="started",
            mode="prefill",
            prefill_instance=self.instance_id,
            control=control,
        )
        await super().start()

    async def stop(self) -> None:
        if self._control_server is not None:
            self._control_server.close()
        await super().stop()

    # ---- control channel (decode -> prefill) -----------------------------------------------
    async def _serve_control(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Metadata and ABORT frames from a decode. A peer that vanishes is not an event
        here, as with ZMQ: prefill learns about a dead decode only through its transfers."""
        try:
            while True:
                header, _ = await read_frame(reader)
                kind = header.get("type")
                room = int(header.get("room", -1))
                if kind == "META":
                    if header.get("prefill_instance") != self.instance_id:
                        log_event(
                            "meta_ignored",
                            bootstrap_room=room,
                            reason="stale prefill instance",
                            got=header.get("prefill_instance"),
                        )
                        continue
                    self._register_decode(str(header["kv_addr"]), str(header.get("decode_instance", "")))
                    self._on_meta(room, str(header["kv_addr"]), writer, int(header.get("decode_prefix_len", 0)))
                elif kind == "ABORT":
                    req = self.by_room.get(room)
                    if req is None:  # decode gave up before our leg arrived: fail it on arrival
                        self._pending_abort[room] = time.monotonic()
                    elif req.status.poll is not KVPoll.Success:
                        req.status.fail("Aborted by AbortReq.")
                        log_event("req", rid=req.rid, bootstrap_room=room, state="abort_from_decode")
                        self.wake()
        except (asyncio.IncompleteReadError, ConnectionError, ValueError):
            pass
        finally:
            writer.close()

    def _register_decode(self, kv_addr: str, instance: str) -> None:
        """The decode at ``kv_addr`` is ``instance``: a new instance there (decode replaced
        behind its address) replaces what prefill knew of the old one. With
        ``stale_decode_registration`` the first instance seen at an address stays, so every
        transfer to its successor is addressed to the dead one until prefill restarts."""
        known = self._decodes.get(kv_addr)
        if known == instance or (known is not None and not self.cfg.behaviour.restarted_decode_replaces_the_old):
            return
        if known is not None:
            log_event("engine", state="decode_replaced", kv_addr=kv_addr, old=known, new=instance)
        self._decodes[kv_addr] = instance

    def _on_meta(self, room: int, kv_addr: str, writer: asyncio.StreamWriter, decode_prefix_len: int) -> None:
        req = self.by_room.get(room)
        if req is None:  # decode was faster than our own leg of the request
            self._pending_meta[room] = (time.monotonic(), kv_addr, writer, decode_prefix_len)
            return
        self._attach_decode(req, kv_addr, writer, decode_prefix_len)

    def _attach_decode(self, req: Req, kv_addr: str, writer: asyncio.StreamWriter, decode_prefix_len: int) -> None:
        """``decode_prefix_len``: the prompt's tokens decode already holds in its radix cache;
        only the KV beyond them is sent (SGLang's ``pop_decode_prefix_len``)."""
        req.decode_prefix_len = decode_prefix_len
        self._kv_addr[req.rid] = kv_addr
        self._decode_link[req.rid] = writer
        req.status.update(KVPoll.WaitingForInput)
        self.wake()

    def _tell_decode(self, req: Req, reason: str) -> None:
        """Send status Failed to the decode that registered for this room."""
        writer = self._decode_link.get(req.rid)
        if (
            writer is None
            or not self.cfg.behaviour.failure_told_to_decode
            or not req.status.told
            or writer.is_closing()
        ):
            return
        self.spawn(self._send_status(writer, req.room or 0, reason))

    async def _send_status(self, writer: asyncio.StreamWriter, room: int, reason: str) -> None:
        with contextlib.suppress(OSError, asyncio.TimeoutError):
            await asyncio.wait_for(
                write_frame(writer, {"type": "STATUS", "room": room, "status": int(KVPoll.Failed), "reason": reason}),
                5.0,
            )

    # ---- queues ----------------------------------------------------------------------------
    def enqueue(self, req: Req) -> None:
        assert req.room is not None
        self.by_room[req.room] = req
        self.bootstrap_queue.append(req)
        req.stage_since = time.monotonic()
        log_event("req", rid=req.rid, bootstrap_room=req.room, state="bootstrap_queue")
        pending = self._pending_meta.pop(req.room, None)
        if pending is not None:
            self._attach_decode(req, *pending[1:])
        if self._pending_abort.pop(req.room, None) is not None:
            req.status.fail("Aborted by AbortReq.")
            log_event("req", rid=req.rid, bootstrap_room=req.room, state="abort_from_decode")

    def tick(self, now: float, *, check_timeouts: bool) -> None:
        """One scheduler step, in SGLang's order: timeouts, rooms bootstrapped into the
        waiting queue, transfers ended, failed waiting rooms out, the next forward, and what
        was kept for rooms not yet seen expired."""
        if check_timeouts:
            self._check_timeouts(now)
        self.poll_failures.poll(self.bootstrap_queue, self.waiting, self.inflight)
        self._pop_bootstrapped(now)
        self._pop_transferred(now)
        self._drop_failed_waiting(now)
        self._start_forward()
        self._expire_pending(now)

    def _pop_bootstrapped(self, now: float) -> None:
        """Rooms whose handshake ended: failed ones answered, the others to the waiting queue."""
        for req in list(self.bootstrap_queue):
            if req.leaked:
                continue
            if req.status.poll is KVPoll.Failed:
                self.bootstrap_queue.remove(req)
                self.metrics.count_failure(bootstrap=True)
                self._fail(req, "Prefill bootstrap failed", now)
            elif req.status.poll >= KVPoll.WaitingForInput:
                self.bootstrap_queue.remove(req)
                self.metrics.stage("prefill_bootstrap", now - req.stage_since)
                req.stage_since = now
                self.alloc(req.prompt_tokens)
                self.waiting.append(req)
                log_event("req", rid=req.rid, bootstrap_room=req.room, state="waiting")

    def _pop_transferred(self, now: float) -> None:
        """Rooms of the inflight queue whose KV transfer ended, delivered or failed."""
        for req in list(self.inflight):
            if req.leaked:
                continue
            if req.status.poll is KVPoll.Success:
                self.inflight.remove(req)
                self.metrics.stage("prefill_transfer_kv_cache", now - req.stage_since)
                self._forget(req)
                self.free(req.prompt_tokens)
                req.finish = {"type": "length", "length": 0}
                self.finish_ok(req)
            elif req.status.poll is KVPoll.Failed:
                self.metrics.count_failure(bootstrap=False)
                if not self.cfg.behaviour.failed_room_released:  # answered, but the room and its KV stay, for good
                    req.leaked = True
                    self._fail(req, "Prefill transfer failed", now)
                    continue
                self.inflight.remove(req)
                self.free(req.prompt_tokens)
                self._fail(req, "Prefill transfer failed", now)

    def _drop_failed_waiting(self, now: float) -> None:
        """SGLang's resolve_waiting_queue_bootstrap: a room whose transfer failed while it
        waited for a forward (decode aborted it) leaves before the forward, its KV freed."""
        for req in [r for r in self.waiting if not r.leaked and r.status.poll is KVPoll.Failed]:
            self.waiting.remove(req)
            self.free(req.prompt_tokens)
            self.metrics.count_failure(bootstrap=True)
            self._fail(req, "Prefill bootstrap failed", now)

    def _start_forward(self) -> None:
        """The waiting rooms as the next batch, once the last forward has ended."""
        if self.waiting and not self.forwarding:
            batch = [r for r in self.waiting if not r.leaked]
            self.waiting.clear()
            if batch:
                self.forwarding = batch
                self.spawn(self._forward(batch))

    def _expire_pending(self, now: float) -> None:
        """Decode's metadata and aborts kept for rooms prefill has not seen yet, dropped
        once too old to belong to a room still coming."""
        cutoff = now - _PENDING_META_TTL_S
        for room in [r for r, (t, *_) in self._pending_meta.items() if t < cutoff]:
            del self._pending_meta[room]
        for room in [r for r, t in self._pending_abort.items() if t < cutoff]:
            del self._pending_abort[room]

    def _check_timeouts(self, now: float) -> None:
        if self.cfg.behaviour.bootstrap_timeout:
            for req in self.bootstrap_queue:
                elapsed = now - req.arrival
                if req.status.poll is KVPoll.Bootstrapping and elapsed > self.cfg.bootstrap_timeout_s:
                    req.status.fail(f"Request {req.room} timed out after {elapsed:.1f}s in KVPoll.Bootstrapping")
                    log_event(
                        "timeout",
                        rid=req.rid,
                        bootstrap_room=req.room,
                        watchdog="bootstrap",
                        elapsed_s=f"{elapsed:.3f}",
                    )
        if self.cfg.behaviour.inflight_watchdog:
            for req in self.inflight:
                elapsed = now - req.stage_since
                if req.status.poll not in (KVPoll.Success, KVPoll.Failed) and elapsed > self.cfg.inflight_timeout_s:
                    req.status.fail(f"Request {req.room} timed out after {elapsed:.1f}s in the prefill inflight queue")
                    log_event(
                        "timeout", rid=req.rid, bootstrap_room=req.room, watchdog="inflight", elapsed_s=f"{elapsed:.3f}"
                    )
                    self._cancel_transfer(req)

    def _fail(self, req: Req, what: str, now: float) -> None:
        err = req.status.error()
        message = f"{what} for request rank=0 req.rid={req.rid!r} req.bootstrap_room={req.room} with exception {err}"
        self._tell_decode(req, str(err))
        self._forget(req)
        self.finish_error(req, 500, message)

    def _forget(self, req: Req) -> None:
        self._cancel_transfer(req)
        if req.room is not None and self.by_room.get(req.room) is req:
            del self.by_room[req.room]
        self._decode_link.pop(req.rid, None)
        self._kv_addr.pop(req.rid, None)

    def _cancel_transfer(self, req: Req) -> None:
        task = self._transfers.pop(req.rid, None)
        if task is not None:
            task.cancel()

    # ---- forward and transfer --------------------------------------------------------------
    async def _forward(self, batch: list[Req]) -> None:
        """The batch's prompts, forwarded in steps of ``prefill_chunk_tokens``, as SGLang's
        chunked prefill does: between steps a room whose transfer failed meanwhile (decode
        aborted it) leaves, its KV freed and its request failed (SGLang's
        ``process_prefill_chunk`` -> ``handle_bootstrap_failure``); the rest go on."""
        start = time.monotonic()
        left = {req.rid: req.prompt_tokens for req in batch}
        try:
            while any(left.values()):
                budget = self.cfg.prefill_chunk_tokens
                step = 0
                for req in batch:
                    take = min(left[req.rid], budget - step)
                    left[req.rid] -= take
                    step += take
                await asyncio.sleep(step * self.cfg.prefill_s_per_token)
                for req in [r for r in batch if left[r.rid] and not r.leaked and r.status.poll is KVPoll.Failed]:
                    batch.remove(req)
                    left[req.rid] = 0
                    self.free(req.prompt_tokens)
                    self.metrics.count_failure(bootstrap=True)
                    self._fail(req, "Prefill bootstrap failed", time.monotonic())
        finally:
            self.forwarding = []
        now = time.monotonic()
        for req in batch:
            if req.aborted and not req.leaked:
                continue
            self.metrics.stage("prefill_forward", now - start)
            req.digest = context_digest(req.input_ids)
            req.output_ids = [next_token(req.digest, 0, ignore_eos=req.ignore_eos, salt=req.sampling_salt)]
            req.first_token_at = now
            req.stage_since = now
            self.inflight.append(req)
            log_event("req", rid=req.rid, bootstrap_room=req.room, state="inflight")
            if not req.leaked:
                self._transfers[req.rid] = self.spawn(self._transfer(req))
        self.wake()

    async def _transfer(self, req: Req) -> None:
        kv_addr = self._kv_addr.get(req.rid, "")
        writer: asyncio.StreamWriter | None = None
        idle_s, self._last_transfer = time.monotonic() - self._last_transfer, time.monotonic()
        try:
            if idle_s >= _IDLE_GAP_S and not self.cfg.behaviour.transfers_start_after_idle:
                await asyncio.sleep(_IDLE_STALL_SHARE * self.cfg.waiting_timeout_s)
            host, port = split_addr(kv_addr)
            reader, w = await asyncio.wait_for(asyncio.open_connection(host, port), _KV_CONNECT_TIMEOUT_S)
            writer = w  # for the finally below, which closes it
            total = max(0, req.prompt_tokens - req.decode_prefix_len) * self.cfg.kv_bytes_per_token
            await write_frame(
                w,
                {
                    "type": "KV_BEGIN",
                    "room": req.room,
                    "bytes": total,
                    "decode_instance": self._decodes.get(kv_addr, ""),
                },
            )
            req.status.update(KVPoll.Transferring)
            sent, checksum = 0, 1  # the Adler-32 of the KV as computed (SGLang's KV checksum)
            while sent < total:
                chunk = pattern(req.digest or "", min(self.cfg.kv_chunk_bytes, total - sent))
                checksum = zlib.adler32(chunk, checksum)
                await write_frame(w, {"type": "KV_CHUNK", "room": req.room}, self.corruption.passed(chunk))
                sent += len(chunk)
            aux = {"digest": req.digest, "first_token": req.output_ids[0], "prompt_tokens": req.prompt_tokens}
            if self.cfg.kv_checksum:
                aux["kv_checksum"] = checksum
            await write_frame(w, {"type": "KV_END", "room": req.room, "aux": aux})
            header, _ = await read_frame(reader)
            if header.get("type") == "ACK":
                req.status.update(KVPoll.Success)
            else:
                req.status.fail(str(header.get("reason", "decode refused the KV")))
        except (OSError, asyncio.IncompleteReadError, asyncio.TimeoutError, ValueError):
            req.status.fail(f"Failed to send kv chunk of {req.room} to {kv_addr}")
        finally:
            self._last_transfer = time.monotonic()
            if writer is not None:
                writer.close()
            self.wake()

    def release(self, req: Req, reason: str) -> None:
        if req in self.bootstrap_queue:
            self.bootstrap_queue.remove(req)
        if req in self.waiting:
            self.waiting.remove(req)
            self.free(req.prompt_tokens)
        if req in self.inflight:
            self.inflight.remove(req)
            self.free(req.prompt_tokens)
        elif req in self.forwarding:
            self.free(req.prompt_tokens)
        req.status.fail(reason)
        self._forget(req)

    def publish(self, now: float, *, gen_throughput: float) -> None:
        self.metrics.set_queues(
            running=len(self.forwarding),
            queue=len(self.waiting),
            used_tokens=self.used_tokens,
            pool_tokens=self.cfg.kv_pool_tokens,
            gen_throughput=gen_throughput,
            prefill_bootstrap=len(self.bootstrap_queue),
            prefill_inflight=len(self.inflight),
        )

    def loads(self) -> dict[str, int]:
        waiting = len(self.bootstrap_queue) + len(self.waiting)
        running = len(self.forwarding) + len(self.inflight)
        return {"running": running, "waiting": waiting, "total": running + waiting,
                "prefill_bootstrap_queue_reqs": len(self.bootstrap_queue), "prefill_inflight_queue_reqs": len(self.inflight)}  # fmt: skip

    def is_idle(self) -> bool:
        return not (self.bootstrap_queue or self.waiting or self.forwarding or self.inflight)
