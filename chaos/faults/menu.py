"""The ``faults`` fixture: the faults a suite can ask for, by name, each a context manager
run by ``FaultRunner`` (trigger, inject, verify, heal, verify the heal):

    with faults.kill("decode", when=gauge("decode", "num_decode_transfer_queue_reqs") > 0):
        convo.run()

A link breaks by Toxiproxy where one sits on it, by packet rules where real engines pick
their own ports, or by an attached deployment's own commands.
"""

from __future__ import annotations

import contextlib
from contextlib import contextmanager
from typing import Any, Callable, Iterator, cast

from chaos.errors import ConfigError
from chaos.faults.client import ClientFault, Idle
from chaos.faults.engine_api import AbortAll, CacheFlush, SenderCorrupt
from chaos.faults.hooks import EngineHooks
from chaos.faults.mismatch import MismatchedStart
from chaos.faults.network import ProxyDown, ToxicFault, toxiproxy_restarter
from chaos.faults.packet import PacketFault, PacketLinks
from chaos.faults.process import Freeze, Kill, Restart, Terminate
from chaos.faults.queued import PacketCorrupt, PacketDelay, PacketDuplicate, Queued
from chaos.faults.runner import DEFAULT_TRIGGER_DEADLINE_S, FaultBlock, FaultRunner
from chaos.observe.triggers import Condition, requests_sent
from chaos.targets.base import Capability
from chaos.targets.toxiproxy import Toxic

__all__ = ["TRANSFER_CRAWL_KB_S", "Faults"]

_HTTP_LINKS = ("client_router", "bootstrap")
# A kv link crawling at this rate holds a real engine's transfer open for seconds: the tiny
# model's KV is about 256 bytes a token (2 layers, 2 KV heads of 16, K and V, bf16), so a
# 500-word prompt's crosses in tens of seconds, well past a trigger sampled at 10 Hz.
TRANSFER_CRAWL_KB_S = 4


class Faults(FaultRunner):
    """Every fault by name: processes, an engine's own API, the links."""

    # ---- shorthands ---------------------------------------------------------------------------
    def by_clients(self, description: str) -> FaultBlock:
        """Bracket chaos that the workload itself commits (hang-ups, abandoned requests)."""
        return self.apply(ClientFault(description))

    def idle(self, seconds: float) -> FaultBlock:
        """No request for ``seconds`` (``Idle``): the block holds the silence until then, or
        until a request breaks it, which fails the heal's proof. Nothing may be sent inside."""
        broken = requests_sent(self.history, len(self.history.ops()) + 1)
        return self.apply(Idle(self.history, seconds), until=broken, hold_s=seconds)

    def engine_hooks(self) -> FaultBlock:
        """Bracket the requests judged under SGLang's failure hooks, which the stack's engines
        started with (``stack_factory.own(hooks=FailureHooks(...))``)."""
        return self.apply(EngineHooks(self.target))

    def mismatched_pages(self) -> FaultBlock:
        """Bracket the requests judged while decode's page size is not prefill's, as the
        stack's engines started (``stack_factory.own(decode_page_size=...)``)."""
        page_size = self.target.info.config.get("decode_page_size")
        return self.apply(MismatchedStart(self.target, "decode", "--page-size", page_size))

    def mismatched_context(self, service: str) -> FaultBlock:
        """Bracket the requests judged while the context length of ``service``'s kind is not
        the other's, as the stack's engines started (``stack_factory.own(context_length=...)``)."""
        length = self.target.info.config.get("context_length", {}).get(service)
        return self.apply(MismatchedStart(self.target, service, "--context-length", length))

    def abort_all(self, service: str, **kw: Any) -> FaultBlock:
        """Every request ``service`` holds aborted through its own ``/abort_request``."""
        return self.apply(AbortAll(self.target, service), **kw)

    def flush_cache(self, service: str, **kw: Any) -> FaultBlock:
        """``service`` asked once to flush its cache (``/flush_cache``): refused while busy."""
        return self.apply(CacheFlush(self.target, service), **kw)

    def kill(self, service: str, **kw: Any) -> FaultBlock:
        return self.apply(Kill(self.target, service), **kw)

    def terminate(self, service: str, *, drain_s: float, **kw: Any) -> FaultBlock:
        """SIGTERM ``service``; when the block ends, wait up to ``drain_s`` for its exit, then start it."""
        return self.apply(Terminate(self.target, service, drain_s=drain_s), **kw)

    def freeze(self, service: str, **kw: Any) -> FaultBlock:
        return self.apply(Freeze(self.target, service), **kw)

    def restart(self, service: str, **kw: Any) -> FaultBlock:
        return self.apply(Restart(self.target, service), **kw)

    # ---- links: Toxiproxy where it sits on the link, packet rules where real engines pick the ports
    def _by_packets(self, link: str) -> bool:
        """Whether this target breaks ``link`` with packet rules, or an attached deployment's
        commands for them (no proxy sits on it)."""
        return link not in self.target.info.proxies and link in getattr(self.target, "packet_links", ())

    def _packets(
        self, link: str, *, mode: str = "", rate_kbit: int | None = None, stream: str = "", **kw: Any
    ) -> FaultBlock:
        """A packet fault on ``link``. ``stream`` (a Toxiproxy direction) is not needed: rules
        act on both directions of the link's connections (a KV link blackholed upstream
        stalls the KV as surely when its acknowledgements vanish too), and a crawl shapes the
        data's way, to the link's ports."""
        by_commands = getattr(self.target, "link_fault", None)  # an attached deployment's own commands
        fault = (
            by_commands(link, mode=mode, rate_kbit=rate_kbit)
            if by_commands
            else PacketFault(self.target, link, mode=mode, rate_kbit=rate_kbit)  # type: ignore[arg-type]
        )
        return self.apply(fault, **kw)

    def _toxiproxy_only(self, link: str, what: str) -> None:
        if self._by_packets(link):
            raise ConfigError(
                f"{what} on {link} needs a Toxiproxy on the link; this target breaks {link} with packet rules, which cannot do it"
            )

    def down(self, link: str, **kw: Any) -> FaultBlock:
        """The link is down: open connections closed, new ones refused (Toxiproxy's disabled
        proxy; with packet rules, every packet answered with a reset)."""
        if self._by_packets(link):
            return self._packets(link, mode="reset", **kw)
        fault = ProxyDown(
            self.toxiproxy,
            link,
            self.target.info.proxies[link]["listen"],
            restart_toxiproxy=toxiproxy_restarter(self.target),
        )
        return self.apply(fault, **kw)

    def transfer_window(self) -> contextlib.AbstractContextManager[Any]:
        """KV transfers last long enough for a trigger to act inside them while the block
        runs: on a target whose own transfers do (pdsim: its KV costs are set so), nothing;
        where real engines move their KV in milliseconds over a packet link, the kv link
        crawls (``TRANSFER_CRAWL_KB_S``), a fault recorded like any other."""
        if self._by_packets("kv"):
            return self.bandwidth("kv", TRANSFER_CRAWL_KB_S)
        return contextlib.nullcontext()

    def refuse(self, link: str, **kw: Any) -> FaultBlock:
        """New connections on the link refused, open ones carry on (packet rules only: a
        Toxiproxy cannot refuse without closing what it holds)."""
        if not self._by_packets(link):
            raise ConfigError(f"refuse on {link} needs packet rules; on a Toxiproxy link use down()")
        return self._packets(link, mode="refuse", **kw)

    def toxic(
        self,
        proxy: str,
        kind: str,
        *,
        stream: str = "downstream",
        when: Condition | None = None,
        deadline_s: float = DEFAULT_TRIGGER_DEADLINE_S,
        until: Condition | None = None,
        hold_s: float = 0.0,
        **attributes: Any,
    ) -> FaultBlock:
        toxic = Toxic(f"pdchaos_{kind}_{stream}", kind, stream, 1.0, attributes)  # type: ignore[arg-type]
        probe = (
            f"http://{self.target.info.proxies[proxy]['listen']}/health"
            if proxy in _HTTP_LINKS and stream == "downstream"
            else None
        )
        fault = ToxicFault(
            self.toxiproxy, proxy, toxic, probe_url=probe, restart_toxiproxy=toxiproxy_restarter(self.target)
        )
        return self.apply(fault, when=when, deadline_s=deadline_s, until=until, hold_s=hold_s)

    def _queued(self, link: str, what: str, make: Callable[[PacketLinks], Queued], **kw: Any) -> FaultBlock:
        """A fault by the queue handler on ``link``: only a packet link of a stack pd-chaos made
        (an attached deployment's stack file gives no command for it). ``stream`` is not
        needed: the handler takes the data's way, to the link's ports."""
        if not self._by_packets(link) or getattr(self.target, "link_fault", None):
            raise ConfigError(
                f"{what} on {link} needs a packet link of a stack pd-chaos made (sglang-cpu's kv, control)"
            )
        kw.pop("stream", None)
        return self.apply(make(cast(PacketLinks, self.target)), **kw)

    def latency(self, link: str, latency_ms: int, *, jitter_ms: int = 0, **kw: Any) -> FaultBlock:
        """Delay on the link (suites that delay an engine link need ``link_delay``): Toxiproxy's
        latency toxic, or on a packet link the queue handler."""
        if self._by_packets(link):
            return self._queued(link, "delay", lambda t: PacketDelay(t, link, latency_ms, jitter_ms=jitter_ms), **kw)
        return self.toxic(link, "latency", latency=latency_ms, jitter=jitter_ms, **kw)

    def corrupt(self, link: str, prob: float, *, min_payload: int = 1024, **kw: Any) -> FaultBlock:
        """At ``prob``, a byte flipped in each data packet on the link (suites that corrupt a
        link need ``link_corrupt``): on a packet link the queue handler rewrites the packets
        with their checksums made right; Toxiproxy has no toxic that does it, so on pdsim's kv
        link its prefill flips the bytes as it sends them (``SenderCorrupt``)."""
        if link == "kv" and not self._by_packets(link) and Capability.DEFECTS in self.target.capabilities:
            kw.pop("stream", None)
            return self.apply(SenderCorrupt(self.target, prob), **kw)  # pdsim's sender: no proxy rewrites bytes
        return self._queued(link, "corrupting", lambda t: PacketCorrupt(t, link, prob, min_payload=min_payload), **kw)

    def duplicate(self, link: str, prob: float, *, delay_ms: int = 0, jitter_ms: int = 0, **kw: Any) -> FaultBlock:
        """At ``prob``, each packet on the link sent twice, every packet and copy held
        ``delay_ms`` ± ``jitter_ms`` (suites that do it need ``link_duplicate``): the queue
        handler on a packet link; a proxied link carries a byte stream, with no packets to copy."""
        return self._queued(
            link,
            "duplication",
            lambda t: PacketDuplicate(t, link, prob, delay_ms=delay_ms, jitter_ms=jitter_ms),
            **kw,
        )

    def bandwidth(self, link: str, rate_kb_s: int, **kw: Any) -> FaultBlock:
        """The link slowed to ``rate_kb_s`` KB/s (a crawl: an htb class on packet links)."""
        if self._by_packets(link):
            if rate_kb_s <= 0:
                raise ConfigError(
                    "a packet link's bandwidth must be above 0 (a link that holds everything is a blackhole())"
                )
            return self._packets(link, rate_kbit=rate_kb_s * 8, **kw)
        return self.toxic(link, "bandwidth", rate=rate_kb_s, **kw)

    def blackhole(self, link: str, *, timeout_ms: int = 0, **kw: Any) -> FaultBlock:
        """Everything on the link vanishes; with ``timeout_ms`` Toxiproxy closes the
        connections after it (packet rules keep them hanging: no timeout there)."""
        return self._timed(link, "blackhole", "timeout", timeout_ms, "a blackhole that closes after a timeout", **kw)

    @contextmanager
    def partition(self, link: str) -> Iterator[None]:
        """Nothing crosses the link either way, and no close or reset is passed on: a peer
        lost behind a partition (a dead host; RDMA, where no kernel resets a connection).
        Packet rules drop both directions; on a Toxiproxy link, a blackhole on each stream
        (its timeout toxic reads nothing, so it passes on no close either)."""
        if self._by_packets(link):
            with self._packets(link, mode="blackhole"):
                yield
            return
        with self.blackhole(link, stream="downstream"), self.blackhole(link, stream="upstream"):
            yield

    def reset_peer(self, link: str, *, timeout_ms: int = 0, **kw: Any) -> FaultBlock:
        return self._timed(link, "reset", "reset_peer", timeout_ms, "a reset after a timeout", **kw)

    def _timed(self, link: str, mode: str, toxic: str, timeout_ms: int, timed: str, **kw: Any) -> FaultBlock:
        """Packet rules of ``mode`` at once, or Toxiproxy's ``toxic`` (the only one that can
        act after ``timeout_ms``)."""
        if self._by_packets(link) and not timeout_ms:
            return self._packets(link, mode=mode, **kw)
        self._toxiproxy_only(link, timed)
        return self.toxic(link, toxic, timeout=timeout_ms, **kw)

    def slicer(
        self, link: str, *, average_size: int, size_variation: int = 0, delay_us: int = 0, **kw: Any
    ) -> FaultBlock:
        self._toxiproxy_only(link, "slicer")
        return self.toxic(
            link, "slicer", average_size=average_size, size_variation=size_variation, delay=delay_us, **kw
        )

    def limit_data(self, link: str, nbytes: int, **kw: Any) -> FaultBlock:
        self._toxiproxy_only(link, "limit_data")
        return self.toxic(link, "limit_data", bytes=nbytes, **kw)
