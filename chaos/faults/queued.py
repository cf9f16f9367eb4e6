"""Faults on a packet link by its packets' own bytes and times: an NFQUEUE rule in the stack's
namespace hands the traffic *to* the link's ports to the queue handler
(``chaos.system.queue_handler``), a process started inside that namespace, which holds each
packet for the delay (and its jitter), or flips a byte of its payload, before it goes on.

That is the data's way on a link (prefill's KV to decode's transport; decode's handshake to
prefill's port): a delay makes a round trip on it ``latency_ms`` longer, as Toxiproxy's
latency toxic on a link's upstream does; a corruption reaches the KV's receiver. The handler
is bound before the rule is added and stopped after the rule is gone: no packet meets a queue
with no one to take it, and the packets held at the heal go on at once.

Verification is the rule read back from the kernel and the handler alive; the evidence at
the heal is the rule's counters and the handler's own figures (packets, the shortest, mean
and longest holds, packets reordered and corrupted), so a fault that met no traffic says so.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from chaos.errors import FaultNotApplied, FaultNotHealed, TargetError
from chaos.faults.base import Fault
from chaos.faults.packet import PacketLink, PacketLinks
from chaos.system.netns import Namespace
from chaos.system.procs import ProcSpec, alive, spawn, stop_group
from chaos.system.wait import STATE_CHANGE_S, wait_until
from chaos.targets.base import ENGINES

__all__ = ["PacketCorrupt", "PacketDelay", "PacketDuplicate", "Queued", "WholePackets"]

_queues = itertools.count(0x40)


class Queued(Fault):
    """``link``'s traffic to its ports through the queue handler, in the namespace the target
    names, with the handler's options ``handler_args``."""

    kind = "packet"
    what = "queued"

    def __init__(self, target: PacketLinks, link: str, handler_args: list[str], *, seed: int = 0) -> None:
        self.target, self.link, self.seed = target, link, seed
        self.handler_args = handler_args
        self.queue = next(_queues)
        self.tag = f"pdchaos-{link}-{self.what}-{self.queue:x}"
        self._dir: Path | None = None  # made at the injection, removed at the heal: the handler's log and figures
        self._at: PacketLink | None = None
        self._pid: int | None = None  # the handler's
        self._figures: dict[str, Any] | None = None
        self._met = ""

    @property
    def implicates(self) -> tuple[str, ...]:
        return ENGINES  # both ends of a link between the engines

    def describe(self) -> str:
        return f"{' '.join(self.handler_args)} on {self.link} (NFQUEUE and the queue handler)"

    def _file(self, name: str) -> Path:
        if self._dir is None:
            raise FaultNotApplied(f"{self.describe()} was never injected")
        return self._dir / name

    @property
    def _stats(self) -> Path:
        return self._file("stats.json")

    @property
    def _log(self) -> Path:
        return self._file("handler.log")

    def _figures_now(self) -> dict[str, Any] | None:
        if self._dir is None:
            return None
        try:
            return dict(json.loads(self._stats.read_text()))
        except (OSError, ValueError):
            return None

    @property
    def figures(self) -> dict[str, Any]:
        """The handler's figures (``chaos.system.queue_handler.Stats``): as it last wrote them while
        the fault is on, its last word after the heal; empty before it wrote any."""
        return (self._figures_now() if self._figures is None else self._figures) or {}

    def _prepare(self, at: PacketLink) -> None:
        """What the namespace needs before the handler takes its packets (nothing by default)."""

    def inject(self) -> None:
        self._at = at = self.target.packet_link(self.link)
        self._prepare(at)
        self._dir = Path(tempfile.mkdtemp(prefix=f"pdchaos-queue-{self.queue:x}-"))
        argv = (
            *at.namespace.enter(),
            sys.executable,
            "-m",
            "chaos.system.queue_handler",
            f"--queue={self.queue}",
            *self.handler_args,
            f"--seed={self.seed}",
            f"--stats={self._stats}",
            f"--parent={os.getpid()}",
        )
        self._pid = pid = spawn(ProcSpec("queue-handler", argv, {}, self._log))
        try:
            wait_until(
                lambda: not alive(pid) or self._stats.exists(),
                timeout_s=STATE_CHANGE_S,
                what=f"the handler bound to NFQUEUE {self.queue}",
            )
        except TargetError as exc:
            raise FaultNotApplied(f"the handler did not start: {exc}; its log: {self._tail()}") from exc
        if not alive(pid):
            raise FaultNotApplied(f"the handler exited at its start: {self._tail()}")
        at.namespace.add_queue(at.ports, self.queue, self.tag)

    def _tail(self) -> str:
        try:
            return " | ".join(self._log.read_text(errors="replace").strip().splitlines()[-3:]) or "empty"
        except OSError:
            return "none written"

    def at_namespace(self) -> Namespace:
        if self._at is None:
            raise FaultNotApplied(f"{self.describe()} was never injected")
        return self._at.namespace

    def verify(self) -> str:
        if self._at is None or self._pid is None:
            raise FaultNotApplied(f"{self.describe()} was never injected")
        ns = self._at.namespace
        if ns.rule_counters(self.tag) is None:
            raise FaultNotApplied(f"no rule tagged {self.tag} listed in {ns.path}")
        if not alive(self._pid):
            raise FaultNotApplied(f"the handler exited: {self._tail()}")
        return (
            f"NFQUEUE {self.queue} rules tagged {self.tag} on the traffic to ports {list(self._at.ports)} "
            f"({self._at.what} in {ns.path}); the queue handler (pid {self._pid}) takes each packet: "
            f"{' '.join(self.handler_args)}"
        )

    def heal(self) -> None:
        if self._at is None:
            return
        counters = self._at.namespace.rule_counters(self.tag)
        self._at.namespace.remove_queue(self._at.ports, self.queue, self.tag)
        if self._pid is not None:
            stop_group(self._pid, grace_s=STATE_CHANGE_S)  # waits for its exit, and reaps it
        self._figures = self._figures_now() or self._figures
        self._met = str(counters) if counters is not None else self._met
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)

    def verify_healed(self) -> str:
        if self._at is None:
            return "never injected"
        ns = self._at.namespace
        if ns.rule_counters(self.tag) is not None:
            raise FaultNotHealed(f"rules tagged {self.tag} still listed in {ns.path}")
        if self._pid is not None and alive(self._pid):
            raise FaultNotHealed(f"the handler (pid {self._pid}) still runs")
        figures = self._figures or {}
        took = (
            f"the handler took {figures['packets']} packets ({figures['bytes']} bytes), held "
            f"{figures['held_ms_min']:.0f} to {figures['held_ms_max']:.0f} ms (mean {figures['held_ms_mean']:.0f}), "
            f"reordered {figures['reordered']}, corrupted {figures['corrupted']}, "
            f"sent {figures.get('duplicated', 0)} copies again ({figures.get('echoed', 0)} seen back), "
            f"released {figures['released_at_stop']} at the heal"
            if figures.get("packets")
            else "the handler took no packet"
        )
        return (
            f"none listed in {ns.path}, the handler gone; while active the rules met {self._met or 'nothing'}; {took}"
        )


class PacketDelay(Queued):
    """``latency_ms`` ± ``jitter_ms`` (uniform) on each packet to the link's ports."""

    what = "delay"

    def __init__(self, target: PacketLinks, link: str, latency_ms: int, *, jitter_ms: int = 0, seed: int = 0) -> None:
        if latency_ms <= 0 or jitter_ms < 0:
            raise ValueError(f"a delay is above 0 ms and its jitter at least 0, not {latency_ms} and {jitter_ms}")
        self.latency_ms, self.jitter_ms = latency_ms, jitter_ms
        super().__init__(target, link, [f"--delay-ms={latency_ms}", f"--jitter-ms={jitter_ms}"], seed=seed)

    def describe(self) -> str:
        jitter = f" ± {self.jitter_ms} ms" if self.jitter_ms else ""
        return f"delay {self.latency_ms} ms{jitter} on {self.link} (NFQUEUE and the queue handler)"


class WholePackets(Queued):
    """A queued fault that needs each packet whole (to rewrite it, or to send it again).

    NetfilterQueue copies at most about 4 KB of a packet; on a loopback of MTU 65536 TCP's
    segments are up to 64 KB. So while the fault is on, the namespace's loopback MTU is
    ``MTU``, and its segments (every connection's, from its next send) fit the copy; the heal
    restores the MTU it found."""

    MTU = 4000

    def __init__(self, target: PacketLinks, link: str, handler_args: list[str], *, seed: int = 0) -> None:
        self._mtu: int | None = None
        super().__init__(target, link, handler_args, seed=seed)

    def _prepare(self, at: PacketLink) -> None:
        self._mtu = at.namespace.mtu()
        at.namespace.set_mtu(self.MTU)

    def verify(self) -> str:
        mtu = self.at_namespace().mtu()
        if mtu != self.MTU:
            raise FaultNotApplied(f"the loopback's MTU is {mtu}, not {self.MTU}: segments too big to handle whole")
        return f"{super().verify()}; the loopback's MTU {mtu} (was {self._mtu})"

    def heal(self) -> None:
        super().heal()
        if self._at is not None and self._mtu is not None:
            self._at.namespace.set_mtu(self._mtu)

    def verify_healed(self) -> str:
        told = super().verify_healed()
        if self._at is None:
            return told
        mtu = self._at.namespace.mtu()
        if self._mtu is not None and mtu != self._mtu:
            raise FaultNotHealed(f"the loopback's MTU is {mtu}, not the {self._mtu} it was")
        return f"{told}; the loopback's MTU {mtu} again"


class PacketCorrupt(WholePackets):
    """At ``prob``, one byte flipped in the payload of a packet to the link's ports that carries
    at least ``min_payload`` bytes (data, not acknowledgements), its TCP checksum made right:
    the receiver reads the flipped byte."""

    what = "corrupt"

    def __init__(self, target: PacketLinks, link: str, prob: float, *, min_payload: int = 1024, seed: int = 0) -> None:
        if not 0 < prob <= 1:
            raise ValueError(f"a corruption's chance is in (0, 1], not {prob}")
        self.prob, self.min_payload = prob, min_payload
        super().__init__(target, link, [f"--corrupt-prob={prob}", f"--corrupt-min-payload={min_payload}"], seed=seed)

    def describe(self) -> str:
        return f"corrupt a byte of {self.prob:.0%} of the data packets on {self.link} (NFQUEUE and the queue handler)"


class PacketDuplicate(WholePackets):
    """At ``prob``, a packet to the link's ports sent twice: the copy goes from a raw socket
    in the namespace when its own hold ends. With ``jitter_ms`` each packet and each copy is
    held a draw of ``delay_ms`` ± ``jitter_ms``, so copies and packets arrive out of order:
    the receiver's TCP must drop the copies and put the rest back in order."""

    what = "duplicate"

    def __init__(
        self, target: PacketLinks, link: str, prob: float, *, delay_ms: int = 0, jitter_ms: int = 0, seed: int = 0
    ) -> None:
        if not 0 < prob <= 1 or delay_ms < 0 or jitter_ms < 0:
            raise ValueError(
                f"a duplication's chance is in (0, 1] and its delays at least 0, not {prob}, {delay_ms}, {jitter_ms}"
            )
        self.prob, self.delay_ms, self.jitter_ms = prob, delay_ms, jitter_ms
        super().__init__(
            target,
            link,
            [f"--duplicate-prob={prob}", f"--delay-ms={delay_ms}", f"--jitter-ms={jitter_ms}"],
            seed=seed,
        )

    def describe(self) -> str:
        held = f", each held {self.delay_ms} ms ± {self.jitter_ms} ms" if self.delay_ms or self.jitter_ms else ""
        return f"send {self.prob:.0%} of the packets twice on {self.link}{held} (NFQUEUE and the queue handler)"
