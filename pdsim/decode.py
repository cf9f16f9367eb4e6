"""The decode engine: prealloc queue, transfer queue, running batch, heartbeat.

Queue flow (SGLang's ``disaggregation/decode.py``): a request fetches prefill's route info
(cached per bootstrap address), waits in the prealloc queue until the KV pool and a request
slot admit it, sends its metadata to prefill over the control channel (the waiting-timeout
clock starts here), waits in the transfer queue for the KV bytes on its kv server, then in
the waiting queue for a place in the running batch, then decodes one token per step.

Admission (SGLang 0.5.23): decode has ``max_running_requests`` slots for its running batch
plus ``disaggregation_decode_extra_slots`` for requests being received, by default twice the
running limit when that is 32 or less (``arg_groups/pd_disaggregation_hook.py``), so a
request waits in prealloc once running, waiting and transferring requests fill them all.

Timeouts: the waiting timeout covers WaitingForInput and Transferring (the latter is
SGLang PR #31800's fix; the ``stuck_transferring`` defect leaves it out). The heartbeat
GETs each known prefill's bootstrap ``/health``; after N failures every room of that
prefill fails with "Lost connection with prefill instance".
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
import zlib
from dataclasses import dataclass
from typing import Any

import aiohttp

from pdsim.config import EngineConfig
from pdsim.engine import Engine
from pdsim.hooks import Chance, PollFailures
from pdsim.kvcheck import digest_of
from pdsim.kvpoll import KVPoll
from pdsim.model import EOS_ID, context_digest, detokenize, next_token
from pdsim.reqlog import log_event
from pdsim.request import Req, Update
from pdsim.wire import read_frame, write_frame

__all__ = ["DecodeEngine"]

_ROUTE_ATTEMPTS = 15
_ROUTE_TIMEOUT = aiohttp.ClientTimeout(total=5)
_HEARTBEAT_TIMEOUT = aiohttp.ClientTimeout(sock_connect=2, sock_read=3)
_CONTROL_CONNECT_TIMEOUT_S = 5.0
_RADIX_CACHE_ENTRIES = 256  # finished contexts the decode radix cache keeps, the oldest dropped first


@dataclass
class PrefillLink:
    """Decode's view of one prefill: its route info and the control connection."""

    addr: str
    info: dict[str, Any]
    page_size: int = 1  # the tokens of a KV page on that prefill, as its /route says
    writer: asyncio.StreamWriter | None = None
    connecting: bool = False


class DecodeEngine(Engine):
    mode_name = "decode"

    def __init__(self, cfg: EngineConfig) -> None:
        super().__init__(cfg)
        # who this process is: a decode restarted behind the same address is another
        # instance, whose KV buffers prefill must learn again (SGLang's decode re-registers
        # its kv args with each prefill, keyed by its session address)
        self.instance_id = uuid.uuid4().hex
        self.prealloc: list[Req] = []
        self.transfer: list[Req] = []
        self.waiting: list[Req] = []  # KV received, waiting for a place in the running batch
        self.running: list[Req] = []
        self.links: dict[str, PrefillLink] = {}
        self._fetching: dict[str, int] = {}  # addr -> attempts made; present while a fetch runs
        self._fetch_failed: set[str] = set()
        # prefills whose KV layout differs from this decode's, with the error every request
        # bound for one gets (SGLang 0.5.23 raises it in its scheduler loop instead, and exits)
        self._mismatched: dict[str, str] = {}
        self._given_up: set[str] = set()  # ``lost_prefill_never_retried``: prefills the heartbeat lost, for good
        # every prefill whose route decode fetched, until its heartbeat gives it up: SGLang
        # 0.5.23 watches each entry of its prefill_info_table so, whether or not a control
        # link or a room still ties decode to it (``_drop_link`` forgets only the route)
        self._watched: set[str] = set()
        self._transfer_by_room: dict[int, Req] = {}
        self._kv_conn: dict[str, asyncio.StreamWriter] = {}
        self._completions = 0
        self._last_aux: dict[str, Any] | None = None
        self._kv_server: asyncio.AbstractServer | None = None
        self._http: aiohttp.ClientSession | None = None
        # ``bootstrap_call_blocks_decoding``: calls to prefill's bootstrap server (the
        # heartbeat, the route fetch) hold the decode step, as a blocking call inside the
        # scheduler would (SGLang 0.5.23's route fetch still does: docs/known-issues.md)
        self._step = asyncio.Lock()
        # ``kv_socket_leak``: every finished KV connection, kept open for good
        self._leaked_sockets: list[asyncio.StreamWriter] = []
        # ``abort_frees_kv_mid_transfer``: when each room aborted mid-transfer freed its pages
        # (until its KV connection ends)
        self._freed_at: dict[str, float] = {}
        # the decode radix cache (``--disaggregation-decode-enable-radix-cache``): the token
        # sequences (prompt and reply) of finished requests, whose KV decode keeps; lost with
        # the process, as SGLang's
        self._radix: list[tuple[int, ...]] = []
        # SGLang's failure hooks: SGLANG_TEST_DISAGG_FAILURE_PROB, ..._KV_CHECKSUM_MISMATCH_PROB
        self.poll_failures = PollFailures(cfg.poll_failure_prob)
        self.checksum_mismatches = Chance(cfg.kv_checksum_mismatch_prob)
        # rooms of the transfer queue this process failed without telling prefill (a hook's
        # failure), by when: prefill still sends their KV, and in SGLang its write completes
        # on its own (Mooncake's transfer needs nothing of decode), so it is taken and
        # acknowledged here, never parked; forgotten after the waiting timeout
        self._failed_untold: dict[int, float] = {}

    async def start(self) -> None:
        self._http = aiohttp.ClientSession()
        self._kv_server = await asyncio.start_server(self._serve_kv, self.cfg.host, self.cfg.kv_port)
        log_event("engine", state="started", mode="decode", kv=self.cfg.kv_address)
        await super().start()
        self.spawn(self._decode_loop())
        if self.cfg.behaviour.heartbeat:
            self.spawn(self._heartbeat_loop())

    async def stop(self) -> None:
        if self._kv_server is not None:
            self._kv_server.close()
        await super().stop()
        if self._http is not None:
            await self._http.close()

    # ---- prefill route info and control link --------------------------------------------
    async def _fetch_route(self, addr: str) -> None:
        """SGLang's ``_ensure_prefill_info``: 15 attempts at least 1 s apart, 5 s each."""
        assert self._http is not None
        base = f"http://{addr}/route"
        while self._fetching.get(addr, 0) < _ROUTE_ATTEMPTS:
            self._fetching[addr] += 1
            started = time.monotonic()
            try:
                async with (
                    self._blocking_decoding(),
                    self._http.get(
                        base,
                        params=dict.fromkeys(
                            ("prefill_dp_rank", "prefill_cp_rank", "target_tp_rank", "target_pp_rank"), "-1"
                        ),
                        timeout=_ROUTE_TIMEOUT,
                    ) as r,
                ):
                    r.raise_for_status()
                    server = await r.json()
                page_size = int(server.get("page_size") or 1)
                if page_size != self.cfg.page_size and self.cfg.behaviour.peer_page_size_checked:
                    self._refuse_prefill(addr, page_size)
                    break
                rank = {"prefill_dp_rank": "0", "prefill_cp_rank": "0", "target_tp_rank": "0", "target_pp_rank": "0"}
                async with (
                    self._blocking_decoding(),
                    self._http.get(base, params=rank, timeout=_ROUTE_TIMEOUT) as r,
                ):
                    r.raise_for_status()
                    info = await r.json()
                self.links[addr] = PrefillLink(addr=addr, info=info, page_size=page_size)
                self._watched.add(addr)
                log_event(
                    "prefill_info", bootstrap_addr=addr, state="fetched", prefill_instance=info.get("prefill_instance")
                )
                break
            except (aiohttp.ClientError, asyncio.TimeoutError, ValueError) as exc:
                log_event(
                    "prefill_info",
                    bootstrap_addr=addr,
                    state="fetch_failed",
                    attempt=self._fetching[addr],
                    error=type(exc).__name__,
                )
                await asyncio.sleep(max(0.0, 1.0 - (time.monotonic() - started)))
        else:
            log_event(
                "prefill_info",
                bootstrap_addr=addr,
                state="gave_up",
                error=f"Could not fetch prefill parallel info from {addr} after {_ROUTE_ATTEMPTS} attempts",
            )
            self._fetch_failed.add(addr)
        self._fetching.pop(addr, None)
        self.wake()

    def _refuse_prefill(self, addr: str, page_size: int) -> None:
        """A prefill whose pages hold another number of tokens: its KV cannot land here. Every
        request bound for it fails at once with SGLang's words for it, and decode serves on."""
        why = (
            f"Page size mismatch: prefill server has page_size={page_size}, but decode server has "
            f"page_size={self.cfg.page_size}. Both servers must use the same --page-size value."
        )
        self._mismatched[addr] = why
        log_event("prefill_info", bootstrap_addr=addr, state="mismatch", error=why)
        self._fail_rooms(addr, why, waiting_only=True)

    async def _connect(self, link: PrefillLink) -> None:
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(link.info["rank_ip"], int(link.info["rank_port"])), _CONTROL_CONNECT_TIMEOUT_S
            )
        except (OSError, asyncio.TimeoutError) as exc:
            log_event("control", bootstrap_addr=link.addr, state="connect_failed", error=type(exc).__name__)
            self._drop_link(link, "control connect failed")
            self._fail_rooms(
                link.addr,
                f"Failed to connect to prefill control {link.info.get('rank_ip')}:{link.info.get('rank_port')}",
                waiting_only=True,
            )
            return
        finally:
            link.connecting = False
        link.writer = writer
        log_event("control", bootstrap_addr=link.addr, state="connected")
        self.spawn(self._read_control(link, reader))
        self.wake()

    async def _read_control(self, link: PrefillLink, reader: asyncio.StreamReader) -> None:
        """Status frames from prefill: Failed means prefill gave up on the room."""
        try:
            while True:
                header, _ = await read_frame(reader)
                if header.get("type") == "STATUS" and int(header.get("status", -1)) == int(KVPoll.Failed):
                    req = self._transfer_by_room.get(int(header["room"]))
                    if req is not None:
                        req.status.fail("Failed to get kvcache from prefill instance, it might be dead")
                        self.wake()
        except (asyncio.IncompleteReadError, ConnectionError, ValueError):
            pass
        log_event("control", bootstrap_addr=link.addr, state="lost")
        if link.writer is not None:
            link.writer.close()
        link.writer = None
        if self.cfg.behaviour.lost_link_forgets_the_route:
            self._drop_link(link, "control connection lost")

    def _drop_link(self, link: PrefillLink, why: str) -> None:
        """Invalidate cached route info so the next request re-fetches it."""
        if self.links.get(link.addr) is link:
            del self.links[link.addr]
            log_event("prefill_info", bootstrap_addr=link.addr, state="invalidated", reason=why)
        if link.writer is not None:
            link.writer.close()
            link.writer = None

    def _fail_rooms(self, addr: str, reason: str, *, waiting_only: bool = False) -> int:
        n = 0
        queues = [self.prealloc] if waiting_only else [self.prealloc, self.transfer]
        for queue in queues:
            for req in queue:
                if req.bootstrap_addr == addr and req.status.poll is not KVPoll.Success and not req.leaked:
                    req.status.fail(reason)
                    n += 1
        self.wake()
        return n

    def _heartbeat_targets(self) -> set[str]:
        """Every prefill decode fetched a route from and has not given up, or still has rooms
        with: a dropped control link must not end the watch over a prefill, nor over the rooms
        that were waiting on it."""
        addrs = set(self.links) | self._watched
        for queue in (self.prealloc, self.transfer):
            addrs.update(r.bootstrap_addr for r in queue if not r.leaked)
        return addrs

    async def _heartbeat_loop(self) -> None:
        assert self._http is not None
        failures: dict[str, int] = {}
        while True:
            await asyncio.sleep(self.cfg.heartbeat_interval_s)
            targets = self._heartbeat_targets()
            for addr in list(failures):
                if addr not in targets:
                    del failures[addr]
            for addr in targets:
                try:
                    async with (
                        self._blocking_decoding(),
                        self._http.get(f"http://{addr}/health", timeout=_HEARTBEAT_TIMEOUT) as r,
                    ):
                        ok = r.status == 200
                except (aiohttp.ClientError, asyncio.TimeoutError):
                    ok = False
                if ok:
                    failures[addr] = 0
                    continue
                failures[addr] = failures.get(addr, 0) + 1
                misses = self.cfg.heartbeat_max_failure if self.cfg.behaviour.heartbeat_tolerates_misses else 1
                if failures[addr] >= misses:
                    failures[addr] = 0
                    reason = f"Lost connection with prefill instance (bootstrap_addr: {addr})"
                    link = self.links.get(addr)
                    if link is not None:
                        self._drop_link(link, "heartbeat failed")
                    # SGLang's _handle_node_failure fails the rooms bound for the lost prefill only
                    lost = [addr] if self.cfg.behaviour.lost_prefill_fails_its_rooms_only else sorted(targets)
                    n = sum(self._fail_rooms(a, reason) for a in lost)
                    self._watched.discard(addr)  # SGLang's _handle_node_failure pops its prefill_info_table entry
                    if not self.cfg.behaviour.lost_prefill_retried:
                        self._given_up.add(addr)
                    log_event(
                        "heartbeat",
                        bootstrap_addr=addr,
                        state="node_failure",
                        affected=n,
                        error=f"{reason}, {n} requests affected",
                    )

    def _blocking_decoding(self) -> contextlib.AbstractAsyncContextManager[Any]:
        """Held around a decode step and a call to a bootstrap server: where those calls
        block decoding (a defect) they exclude each other, as a blocking call inside the
        scheduler would; otherwise a no-op."""
        return self._step if self.cfg.behaviour.bootstrap_calls_block_decoding else contextlib.nullcontext()

    # ---- kv server (prefill -> decode) ----------------------------------------------------
    async def _serve_kv(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        room = -1
        req: Req | None = None
        try:
            header, _ = await read_frame(reader)
            room = int(header.get("room", -1))
            expected = int(header.get("bytes", 0))
            req = self._transfer_by_room.get(room)
            if req is None and self._failed_untold.pop(room, None) is not None:
                log_event("kv", bootstrap_room=room, state="landed_after_local_failure")
                await self._receive_kv(reader, None)
                await write_frame(writer, {"type": "ACK", "room": room})
                return
            if req is None:
                # KV for a room this process never registered (e.g. from before a restart):
                # nothing polls it, so it is parked and never acknowledged.
                log_event("kv", bootstrap_room=room, state="parked_unknown_room")
                while await reader.read(65536):
                    pass
                return
            if header.get("decode_instance") != self.instance_id:
                # KV bound for the buffers of another decode process at this address (one
                # before a restart): in SGLang it would land in memory this process never
                # gave out; pdsim refuses it, so the room fails instead of decoding garbage
                await self._refuse(
                    writer,
                    req,
                    f"KV for decode instance {header.get('decode_instance')!r}, this is {self.instance_id!r}",
                )
                return
            link = self.links.get(req.bootstrap_addr)
            if link is not None and link.page_size != self.cfg.page_size:  # page_size_unchecked
                # written by prefill at addresses of its own layout: the bytes land, in pages
                # that are not this room's, and the room waits for KV that never comes
                log_event("kv", bootstrap_room=room, state="landed_in_other_pages")
                await self._receive_kv(reader, None)
                await write_frame(writer, {"type": "ACK", "room": room})
                return
            self._kv_conn[req.rid] = writer
            req.status.update(KVPoll.Transferring)
            log_event("req", rid=req.rid, bootstrap_room=room, state="transferring")
            lengths, checksum, aux = await self._receive_kv(reader, req)
            if req.rid in self._freed_at:
                await write_frame(writer, {"type": "ACK", "room": room})
                return
            if sum(lengths) != expected:
                await self._refuse(writer, req, f"KV size mismatch {sum(lengths)} != {expected}")
                return
            if (
                self.cfg.kv_checksum
                and self.cfg.behaviour.kv_checksum_checked
                and (aux.get("kv_checksum") != checksum or self.checksum_mismatches.hits())
            ):
                # SGLang's words (disaggregation/decode.py), and the room fails as a transfer
                await self._refuse(writer, req, f"KV checksum mismatch for room {room}")
                return
            aux["digest"] = digest_of(str(aux["digest"]), checksum, lengths)  # what arrived is what decodes
            self._land_kv(req, aux)
            await write_frame(writer, {"type": "ACK", "room": room})
        except (asyncio.IncompleteReadError, ConnectionError, ValueError):
            log_event("kv", bootstrap_room=room, state="connection_lost")
        finally:
            if req is not None:
                self._kv_conn.pop(req.rid, None)
                self._freed_at.pop(req.rid, None)
            if not self.cfg.behaviour.kv_socket_closed and req is not None and req.status.poll is KVPoll.Success:
                self._leaked_sockets.append(writer)  # never closed: one descriptor more per request
            else:
                writer.close()
            self.wake()

    async def _receive_kv(self, reader: asyncio.StreamReader, req: Req | None) -> tuple[list[int], int, dict[str, Any]]:
        """Read a room's KV chunks until its end frame: each chunk's length, the Adler-32 of
        what arrived, and the end's aux data (the first token, the context's digest, the
        sender's checksum where it took one). ``req`` None: a room decode already failed."""
        lengths, checksum = [], 1
        while True:
            header, payload = await read_frame(reader)
            if header.get("type") == "KV_CHUNK":
                lengths.append(len(payload))
                checksum = zlib.adler32(payload, checksum)
                if req is not None and req.rid in self._freed_at:  # the room was aborted and its pages handed on
                    self._late_write(req)
            elif header.get("type") == "KV_END":
                return lengths, checksum, dict(header.get("aux") or {})

    def _land_kv(self, req: Req, aux: dict[str, Any]) -> None:
        """The room's KV is in place: decode holds its context and first token."""
        aux = self._maybe_mix_up(aux)
        req.digest = str(aux["digest"])
        if req.decode_prefix_len and not self.cfg.behaviour.prefix_kv_joined:
            # the delta's pages are placed wrong: decode attends to its cached prefix alone
            req.digest = context_digest(req.input_ids[: req.decode_prefix_len])
        req.output_ids = [int(aux["first_token"])]
        req.status.update(KVPoll.Success)

    async def _refuse(self, writer: asyncio.StreamWriter, req: Req, reason: str) -> None:
        """KV decode will not take: prefill hears why (ERR), and the room fails with it."""
        await write_frame(writer, {"type": "ERR", "room": req.room, "reason": reason})
        req.status.fail(reason)

    def _late_write(self, aborted: Req) -> None:
        """``abort_frees_kv_mid_transfer``: a chunk of an aborted room's KV has landed in
        pages that went back to the pool when it was aborted. Whoever holds them now (the
        newest request admitted since the abort and still alive) decodes the rest of its
        reply from the aborted request's context. A request whose own KV has not landed yet
        is overwritten by it, as real pages would be: only a write after that corrupts."""
        freed_at = self._freed_at[aborted.rid]
        alive = [
            r
            for r in (*self.transfer, *self.waiting, *self.running)
            if r.stage_since >= freed_at and r.finish is None and not r.leaked
        ]
        victim = max(alive, key=lambda r: r.stage_since, default=None)
        if (
            victim is None
            or victim.status.poll is not KVPoll.Success
            or victim.digest == (digest := context_digest(aborted.input_ids))
        ):
            return
        victim.digest = digest
        log_event(
            "kv",
            bootstrap_room=aborted.room,
            state="late_write_into_freed_pages",
            rid=aborted.rid,
            landed_in=victim.room,
        )

    def _maybe_mix_up(self, aux: dict[str, Any]) -> dict[str, Any]:
        """``room_mixup``: under concurrency, now and then hand out another room's KV."""
        previous, self._last_aux = self._last_aux, aux
        if (
            self.cfg.behaviour.rooms_kept_apart
            or previous is None
            or len(self.transfer) + len(self.waiting) + len(self.running) < 2
        ):
            return aux
        self._completions += 1
        return previous if self._completions % self.cfg.mixup_period == 0 else aux

    # ---- queues ------------------------------------------------------------------------------
    def enqueue(self, req: Req) -> None:
        self.prealloc.append(req)
        req.stage_since = time.monotonic()
        log_event("req", rid=req.rid, bootstrap_room=req.room, state="prealloc_queue")

    def tick(self, now: float, *, check_timeouts: bool) -> None:
        if check_timeouts:
            self._check_timeouts(now)
        self.poll_failures.poll(self.prealloc, self.transfer)
        self._pop_preallocated(now)
        self._pop_transferred(now)
        self._pop_waiting(now)

    def _check_timeouts(self, now: float) -> None:
        for room, at in list(self._failed_untold.items()):
            if now - at > self.cfg.waiting_timeout_s:  # prefill gave the room up too, or never sends
                del self._failed_untold[room]
        timed = (
            {KVPoll.WaitingForInput, KVPoll.Transferring}
            if self.cfg.behaviour.transferring_times_out
            else {KVPoll.WaitingForInput}
        )
        from_arrival = not self.cfg.behaviour.waiting_clock_from_metadata
        for req in self.transfer:
            elapsed = now - (
                req.arrival if from_arrival else req.stage_since
            )  # in transfer: since its metadata went out
            if req.status.poll in timed and not req.leaked and elapsed > self.cfg.waiting_timeout_s:
                state = req.status.poll.name
                req.status.fail(f"Request {req.room} timed out after {elapsed:.1f}s in KVPoll.{state}")
                log_event(
                    "timeout",
                    rid=req.rid,
                    bootstrap_room=req.room,
                    watchdog="waiting",
                    state=state,
                    elapsed_s=f"{elapsed:.3f}",
                )
                self._send_abort(req)

    def _pop_preallocated(self, now: float) -> None:
        for req in list(self.prealloc):
            if req.leaked:
                continue
            if req.status.poll is KVPoll.Failed:
                self.prealloc.remove(req)
                self.metrics.count_failure(bootstrap=True)
                self._fail(req, "Decode handshake failed")
                continue
            addr = req.bootstrap_addr
            if addr in self._mismatched:
                req.status.fail(self._mismatched[addr])
                continue
            if addr in self._given_up:  # lost_prefill_retried off: no new connection to a prefill once lost
                req.status.fail(f"Lost connection with prefill instance (bootstrap_addr: {addr})")
                continue
            link = self.links.get(addr)
            if link is None:
                if addr in self._fetch_failed:
                    self._fetch_failed.discard(addr)
                    self._fail_rooms(addr, "Aborted by AbortReq.", waiting_only=True)
                elif addr not in self._fetching:
                    self._fetching[addr] = 0
                    self.spawn(self._fetch_route(addr))
                continue
            if link.writer is None:
                if not link.connecting:
                    link.connecting = True
                    self.spawn(self._connect(link))
                continue
            need = req.prompt_tokens + req.max_new_tokens
            busy = len(self.transfer) + len(self.waiting) + len(self.running)
            if self.used_tokens + need > self.cfg.kv_pool_tokens or busy >= self.cfg.decode_slots:
                break  # FIFO: waits for memory and a slot, with no timeout (as SGLang)
            self.prealloc.remove(req)
            self.alloc(need)
            self.metrics.stage("decode_prepare", now - req.stage_since)
            req.stage_since = now
            req.status.update(KVPoll.WaitingForInput)
            req.decode_prefix_len = self._cached_prefix(req.input_ids)
            assert req.room is not None
            self._transfer_by_room[req.room] = req
            self.transfer.append(req)
            log_event(
                "req",
                rid=req.rid,
                bootstrap_room=req.room,
                state="transfer_queue",
                decode_prefix_len=req.decode_prefix_len,
            )
            self.spawn(self._send_meta(req, link))

    async def _send_meta(self, req: Req, link: PrefillLink) -> None:
        frame = {
            "type": "META",
            "room": req.room,
            "kv_addr": self.cfg.kv_address,
            "decode_instance": self.instance_id,
            "prefill_instance": link.info.get("prefill_instance"),
            "rid": req.rid,
            "decode_prefix_len": req.decode_prefix_len,
        }
        try:
            if link.writer is None:
                raise ConnectionError("no control connection")
            await asyncio.wait_for(write_frame(link.writer, frame), _CONTROL_CONNECT_TIMEOUT_S)
        except (OSError, asyncio.TimeoutError) as exc:
            req.status.fail(f"Failed to send metadata to prefill {link.addr}: {type(exc).__name__}")
            self.wake()

    def _send_abort(self, req: Req) -> None:
        link = self.links.get(req.bootstrap_addr)
        if link is not None and link.writer is not None and not link.writer.is_closing():
            self.spawn(self._write_quietly(link.writer, {"type": "ABORT", "room": req.room}))
        conn = self._kv_conn.pop(req.rid, None)
        if conn is not None:
            conn.close()

    async def _write_quietly(self, writer: asyncio.StreamWriter, frame: dict[str, Any]) -> None:
        with contextlib.suppress(OSError, asyncio.TimeoutError):
            await asyncio.wait_for(write_frame(writer, frame), _CONTROL_CONNECT_TIMEOUT_S)

    def _pop_transferred(self, now: float) -> None:
        for req in list(self.transfer):
            if req.leaked:
                continue
            if req.status.poll is KVPoll.Success:
                self._leave_transfer(req)
                self.metrics.stage("decode_transferred", now - req.stage_since)
                req.stage_since = now
                self.waiting.append(req)
            elif req.status.poll is KVPoll.Failed:
                self._leave_transfer(req)
                self.metrics.count_failure(bootstrap=False)
                if not req.status.told and req.room is not None:
                    self._failed_untold[req.room] = now
                if not self.cfg.behaviour.failed_transfer_fails:
                    self._answer_anyway(req, now)
                    continue
                self.free(req.prompt_tokens + req.max_new_tokens)
                self._fail(req, "Decode transfer failed")

    def _answer_anyway(self, req: Req, now: float) -> None:
        """Defect: the failed transfer is logged and counted, and the request decoded all the
        same, from whatever its pages hold (no KV came: an empty context), and answered 200."""
        log_event("req", rid=req.rid, bootstrap_room=req.room, state="failed", error=req.status.error())
        req.digest = req.digest or context_digest([])
        req.stage_since = now
        self.waiting.append(req)

    def _pop_waiting(self, now: float) -> None:
        """Into the running batch, FIFO, while it has room."""
        while self.waiting and len(self.running) < self.cfg.max_running_requests:
            req = self.waiting.pop(0)
            req.first_token_at = now
            self.running.append(req)
            log_event("req", rid=req.rid, bootstrap_room=req.room, state="running")
            req.push(Update("tokens"))
            self.note_tokens(now, 1)
            if self.cfg.behaviour.first_token_may_finish:  # prefill's token may end the reply
                self._check_finished(req)

    def _leave_transfer(self, req: Req) -> None:
        self.transfer.remove(req)
        if req.room is not None and self._transfer_by_room.get(req.room) is req:
            del self._transfer_by_room[req.room]

    def _fail(self, req: Req, what: str) -> None:
        err = req.status.error()
        self.finish_error(
            req,
            500,
            f"{what} for request rank=0 decode_req.req.rid={req.rid!r} decode_req.req.bootstrap_room={req.room} with exception {err}",
        )

    # ---- decoding -------------------------------------------------------------------------------
    async def _decode_loop(self) -> None:
        while True:
            if not self.running:
                self._wake.clear()
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), self.cfg.tick_s)
                continue
            async with self._blocking_decoding():
                await asyncio.sleep(self.cfg.decode_s_per_step)
            now = time.monotonic()
            for req in list(self.running):
                if req.leaked or req.finish is not None:
                    continue
                assert req.digest is not None
                token = next_token(req.digest, len(req.output_ids), ignore_eos=req.ignore_eos, salt=req.sampling_salt)
                req.output_ids.append(token)  # an EOS too: SGLang's finished_len counts it; it has no text
                if token == EOS_ID:
                    req.finish = {"type": "stop", "matched": EOS_ID}
                else:
                    if (
                        req.stream
                    ):  # as SGLang: a non-streaming reply reaches its tokenizer once, so it has no inter-token gaps
                        self.metrics.inter_token(self.cfg.decode_s_per_step)
                    req.push(Update("tokens"))
                self.note_tokens(now, 1)
                self._check_finished(req)

    def _check_finished(self, req: Req) -> None:
        if req.finish is None:
            text = detokenize(req.output_ids)
            matched = next((s for s in req.stop if s and s in text), None)
            if matched is not None:
                req.finish = {"type": "stop", "matched": matched}
            elif len(req.output_ids) >= req.max_new_tokens:
                req.finish = {"type": "length", "length": req.max_new_tokens}
        if req.finish is not None:
            self.running.remove(req)
            self.free(req.prompt_tokens + req.max_new_tokens)
            self._remember(req)
            self.finish_ok(req)

    # ---- decode radix cache -------------------------------------------------------------------
    def _cached_prefix(self, ids: list[int]) -> int:
        """How many of the prompt's first tokens decode's radix cache holds (0 without the
        cache): the longest prefix shared with a finished context, leaving the last prompt
        token to be sent."""
        if not self.cfg.decode_radix_cache:
            return 0
        best = 0
        for seq in self._radix:
            n = 0
            for a, b in zip(seq, ids[:-1], strict=False):
                if a != b:
                    break
                n += 1
            best = max(best, n)
        return best

    def flush_cache(self) -> None:
        self._radix.clear()
        log_event("radix_cache", state="flushed")

    def _remember(self, req: Req) -> None:
        if self.cfg.decode_radix_cache and req.finish is not None and req.finish.get("type") != "abort":
            self._radix.append((*req.input_ids, *req.output_ids))
            del self._radix[:-_RADIX_CACHE_ENTRIES]
            log_event("radix_cache", rid=req.rid, state="inserted", tokens=len(self._radix[-1]))

    def abort_ending(self, req: Req, reason: str) -> Update:
        """SGLang aborts a running request with ``FINISH_ABORT()``, no status: a graceful end,
        the stream's last chunk saying ``finish_reason: "abort"`` and then ``[DONE]``, a
        plain reply a 200 (serving_chat.py: only an abort with a status is an error event)."""
        if req in self.running:
            req.finish = {"type": "abort", "message": "Aborted", "status_code": None, "err_type": None}
            return Update("finish")
        return super().abort_ending(req, reason)

    def release(self, req: Req, reason: str) -> None:
        if req in self.prealloc:
            self.prealloc.remove(req)
        elif req in self.transfer:
            req.status.fail(reason)
            if (
                not self.cfg.behaviour.abort_waits_for_the_transfer and req.rid in self._kv_conn
            ):  # the transfer runs on into freed pages
                self._freed_at[req.rid] = time.monotonic()
            else:
                self._send_abort(req)
            self._leave_transfer(req)
            self.free(req.prompt_tokens + req.max_new_tokens)
        elif req in self.waiting or req in self.running:
            (self.waiting if req in self.waiting else self.running).remove(req)
            self.free(req.prompt_tokens + req.max_new_tokens)

    def publish(self, now: float, *, gen_throughput: float) -> None:
        self.metrics.set_queues(
            running=len(self.running),
            queue=len(self.waiting),
            used_tokens=self.used_tokens,
            pool_tokens=self.cfg.kv_pool_tokens,
            gen_throughput=gen_throughput,
            decode_prealloc=len(self.prealloc),
            decode_transfer=len(self.transfer),
        )

    def loads(self) -> dict[str, int]:
        transfer = len(self.transfer) if self.cfg.behaviour.load_report_counts_transfers else 0
        waiting = len(self.prealloc) + transfer + len(self.waiting)
        return {"running": len(self.running), "waiting": waiting, "total": waiting + len(self.running),
                "decode_prealloc_queue_reqs": len(self.prealloc), "decode_transfer_queue_reqs": transfer}  # fmt: skip

    def is_idle(self) -> bool:
        return not (self.prealloc or self.transfer or self.waiting or self.running)
