"""Delay on a packet link: an NFQUEUE rule in the stack's namespace hands the traffic *to* the
link's ports to the delayer (``chaos.system.delayer``), a process started inside that
namespace, which holds each packet for the delay (and its jitter) before it goes on.

That is the data's way on a link (prefill's KV to decode's transport; decode's handshake to
prefill's port), so a round trip on it is ``latency_ms`` longer, as with Toxiproxy's latency
toxic on a link's upstream. The delayer is bound before the rule is added and stopped after
the rule is gone: no packet meets a queue with no one to hold it, and the packets held at
the heal go on at once.

Verification is the rule read back from the kernel and the delayer alive; the evidence at
the heal is the rule's counters and the delayer's own figures (packets held, the shortest,
mean and longest holds, packets reordered), so a delay that met no traffic says so.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from chaos.errors import FaultNotApplied, FaultNotHealed
from chaos.faults.base import Fault
from chaos.faults.packet import PacketLink, PacketLinks
from chaos.system.procs import stop_group
from chaos.system.wait import STATE_CHANGE_S, wait_until
from chaos.targets.base import ENGINES

__all__ = ["PacketDelay"]

_queues = itertools.count(0x40)


class PacketDelay(Fault):
    """``latency_ms`` ± ``jitter_ms`` on ``link``'s traffic to its ports, in the namespace the
    target names."""

    kind = "packet"

    def __init__(self, target: PacketLinks, link: str, latency_ms: int, *, jitter_ms: int = 0, seed: int = 0) -> None:
        if latency_ms <= 0 or jitter_ms < 0:
            raise ValueError(f"a delay is above 0 ms and its jitter at least 0, not {latency_ms} and {jitter_ms}")
        self.target, self.link = target, link
        self.latency_ms, self.jitter_ms, self.seed = latency_ms, jitter_ms, seed
        self.queue = next(_queues)
        self.tag = f"pdchaos-{link}-delay-{self.queue:x}"
        self._dir = Path()  # made at the injection, removed at the heal: the delayer's log and figures
        self._at: PacketLink | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._figures: dict[str, Any] | None = None
        self._met = ""

    @property
    def implicates(self) -> tuple[str, ...]:
        return ENGINES  # both ends of a link between the engines

    def describe(self) -> str:
        jitter = f" ± {self.jitter_ms} ms" if self.jitter_ms else ""
        return f"delay {self.latency_ms} ms{jitter} on {self.link} (NFQUEUE and the delayer)"

    @property
    def _stats(self) -> Path:
        return self._dir / "stats.json"

    @property
    def _log(self) -> Path:
        return self._dir / "delayer.log"

    def _figures_now(self) -> dict[str, Any] | None:
        try:
            return dict(json.loads(self._stats.read_text()))
        except (OSError, ValueError):
            return None

    @property
    def figures(self) -> dict[str, Any]:
        """The delayer's figures (``chaos.system.delayer.Stats``): as it last wrote them while
        the fault is on, its last word after the heal; empty before it wrote any."""
        return (self._figures_now() if self._figures is None else self._figures) or {}

    def inject(self) -> None:
        self._at = at = self.target.packet_link(self.link)
        self._dir = Path(tempfile.mkdtemp(prefix=f"pdchaos-delayer-{self.queue:x}-"))
        argv = [
            *at.namespace.enter(),
            sys.executable,
            "-m",
            "chaos.system.delayer",
            f"--queue={self.queue}",
            f"--delay-ms={self.latency_ms}",
            f"--jitter-ms={self.jitter_ms}",
            f"--seed={self.seed}",
            f"--stats={self._stats}",
            f"--parent={os.getpid()}",
        ]
        with open(self._log, "ab") as log:
            self._proc = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        try:
            wait_until(
                lambda: self._proc is not None and (self._proc.poll() is not None or self._stats.exists()),
                timeout_s=STATE_CHANGE_S,
                what=f"the delayer bound to NFQUEUE {self.queue}",
            )
        except Exception as exc:
            raise FaultNotApplied(f"the delayer did not start: {exc}; its log: {self._tail()}") from exc
        if self._proc.poll() is not None:
            raise FaultNotApplied(f"the delayer exited {self._proc.returncode} at its start: {self._tail()}")
        at.namespace.add_queue(at.ports, self.queue, self.tag)

    def _tail(self) -> str:
        try:
            return " | ".join(self._log.read_text(errors="replace").strip().splitlines()[-3:]) or "empty"
        except OSError:
            return "none written"

    def verify(self) -> str:
        if self._at is None or self._proc is None:
            raise FaultNotApplied(f"{self.describe()} was never injected")
        ns = self._at.namespace
        if ns.rule_counters(self.tag) is None:
            raise FaultNotApplied(f"no rule tagged {self.tag} listed in {ns.path}")
        if self._proc.poll() is not None:
            raise FaultNotApplied(f"the delayer exited {self._proc.returncode}: {self._tail()}")
        return (
            f"NFQUEUE {self.queue} rules tagged {self.tag} on the traffic to ports {list(self._at.ports)} "
            f"({self._at.what} in {ns.path}); the delayer (pid {self._proc.pid}) holds each packet "
            f"{self.latency_ms} ms ± {self.jitter_ms} ms"
        )

    def heal(self) -> None:
        if self._at is None:
            return
        counters = self._at.namespace.rule_counters(self.tag)
        self._at.namespace.remove_queue(self._at.ports, self.queue, self.tag)
        if self._proc is not None and self._proc.poll() is None:
            stop_group(self._proc.pid, grace_s=STATE_CHANGE_S)
            self._proc.wait(timeout=STATE_CHANGE_S)
        self._figures = self._figures_now() or self._figures
        self._met = str(counters) if counters is not None else self._met
        shutil.rmtree(self._dir, ignore_errors=True)

    def verify_healed(self) -> str:
        if self._at is None:
            return "never injected"
        ns = self._at.namespace
        if ns.rule_counters(self.tag) is not None:
            raise FaultNotHealed(f"rules tagged {self.tag} still listed in {ns.path}")
        if self._proc is not None and self._proc.poll() is None:
            raise FaultNotHealed(f"the delayer (pid {self._proc.pid}) still runs")
        figures = self._figures or {}
        held = (
            f"the delayer held {figures['packets']} packets ({figures['bytes']} bytes) "
            f"{figures['held_ms_min']:.0f} to {figures['held_ms_max']:.0f} ms (mean {figures['held_ms_mean']:.0f}), "
            f"reordered {figures['reordered']}, released {figures['released_at_stop']} at the heal"
            if figures.get("packets")
            else "the delayer held no packet"
        )
        return (
            f"none listed in {ns.path}, the delayer gone; while active the rules met {self._met or 'nothing'}; {held}"
        )
