"""Packet rules and shaping inside a network namespace the stack made (``chaos.system.bridge``).

Every command runs in that namespace through ``nsenter --net=/proc/<pid>/ns/net``, so a rule
or a qdisc can never land in the host's own tables, and all of them are gone with the
namespace (its last process), even after a SIGKILL of everything. Loopback is the only
interface there, and on loopback the kernel gives every packet 127.0.0.1 as its source, so
rules are keyed on the port a link's connections are made to (both directions:
``--dport`` the way there, ``--sport`` the way back).

    iptables, chain PDCHAOS (jumped to from INPUT): one tagged set of rules per fault
        blackhole  DROP                             packets vanish: TCP retransmits, peers hang
        reset      REJECT --reject-with tcp-reset   open connections reset, new ones refused
        refuse     the same, on SYN only            new connections refused, open ones carry on
        delay      NFQUEUE --queue-bypass, on the traffic *to* the ports: each packet is
                   handed to the queue handler (``chaos.system.queue_handler``), which holds it for its
                   delay; with no handler bound to the queue, packets pass
    tc, on lo: an htb root whose default class does not exist, so unclassified traffic
        passes unshaped; a fault adds one class at its rate and u32 filters on the traffic
        *to* its ports (the data's way on a link: prefill's KV to decode's transport), so a
        peer's acknowledgements and resets come back at once, as from a slow sender.

Rules sit in INPUT (a packet on loopback passes it once, on delivery): a DROP there is a
true blackhole, where one in OUTPUT would hand the sender an error instead.
Each fault reads its own counters (packets and bytes matched) for its evidence.
"""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
from dataclasses import dataclass
from functools import cache

from chaos.errors import ConfigError, FaultNotApplied
from chaos.system.procs import run

__all__ = ["CHAIN", "MODES", "Namespace", "nfqueue_available"]

CHAIN = "PDCHAOS"
MODES = ("blackhole", "reset", "refuse")
_CALL_S = 10.0
_TARGETS = {
    "blackhole": ("-j", "DROP"),
    "reset": ("-j", "REJECT", "--reject-with", "tcp-reset"),
    "refuse": ("-j", "REJECT", "--reject-with", "tcp-reset"),
}


def _need(tool: str) -> str:
    path = shutil.which(tool)
    if path is None:
        raise ConfigError(
            f"`{tool}` is not installed: link faults on real engines need it (apt-get install iptables iproute2; `make setup-sglang` does)"
        )
    return path


@cache
def nfqueue_available() -> bool:
    """Whether a packet link can be delayed here: the queue handler's binding (NetfilterQueue, the
    ``packets`` extra that ``make setup-sglang`` installs) imports, and the kernel takes an
    NFQUEUE rule (tried once in a throwaway namespace). netem would do it in the kernel, but
    this project's machines lack it ("Specified qdisc kind is unknown")."""
    if importlib.util.find_spec("netfilterqueue") is None or shutil.which("iptables") is None:
        return False
    try:
        probe = subprocess.run(
            ["unshare", "--net", "iptables", "-A", "INPUT", *_queue_target(1)], capture_output=True, timeout=_CALL_S
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return probe.returncode == 0


def _queue_target(queue: int) -> tuple[str, ...]:
    return ("-j", "NFQUEUE", "--queue-num", str(queue), "--queue-bypass")


@dataclass(frozen=True)
class Counters:
    packets: int
    bytes: int

    def __str__(self) -> str:
        return f"{self.packets} packets, {self.bytes} bytes"


class Namespace:
    """The stack's namespace, held by the process ``pid`` (the bridge)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid

    @property
    def path(self) -> str:
        return f"/proc/{self.pid}/ns/net"

    def enter(self) -> tuple[str, ...]:
        """The argv prefix that runs a command in this namespace."""
        return ("nsenter", f"--net={self.path}", "--")

    def run(self, *argv: str, check: bool = True) -> str:
        done = run([*self.enter(), *argv], timeout_s=_CALL_S, what=f"`{' '.join(argv)}` in the stack's namespace")
        if check and done.returncode != 0:
            raise FaultNotApplied(
                f"`{' '.join(argv)}` in {self.path} exited {done.returncode}: {done.stderr.strip()[-300:]}"
            )
        return done.stdout

    # ---- iptables -----------------------------------------------------------------------------
    def _chain(self) -> None:
        ipt = _need("iptables")
        rules = self.run(ipt, "-S")
        if f"-N {CHAIN}" not in rules:
            self.run(ipt, "-N", CHAIN)
        if f"-A INPUT -j {CHAIN}" not in rules:
            self.run(ipt, "-I", "INPUT", "-j", CHAIN)

    @staticmethod
    def _specs(mode: str, ports: tuple[int, ...], tag: str) -> list[tuple[str, ...]]:
        if mode not in MODES:
            raise ConfigError(f"unknown packet fault {mode!r}; known: {', '.join(MODES)}")
        tagged = ("-m", "comment", "--comment", tag)
        if mode == "refuse":
            return [("-p", "tcp", "--dport", str(p), "--syn", *tagged, *_TARGETS[mode]) for p in ports]
        # the resets REJECT sends travel back through INPUT from the port: they must pass
        not_rst = ("!", "--tcp-flags", "RST", "RST") if mode == "reset" else ()
        return [
            ("-p", "tcp", way, str(p), *not_rst, *tagged, *_TARGETS[mode])
            for p in ports
            for way in ("--dport", "--sport")
        ]

    def _append(self, specs: list[tuple[str, ...]]) -> None:
        self._chain()
        for spec in specs:
            self.run(_need("iptables"), "-A", CHAIN, *spec)

    def _delete(self, specs: list[tuple[str, ...]]) -> None:
        for spec in specs:
            self.run(_need("iptables"), "-D", CHAIN, *spec, check=False)

    def add_rules(self, mode: str, ports: tuple[int, ...], tag: str) -> None:
        self._append(self._specs(mode, ports, tag))

    def remove_rules(self, mode: str, ports: tuple[int, ...], tag: str) -> None:
        self._delete(self._specs(mode, ports, tag))

    @staticmethod
    def _queue_specs(ports: tuple[int, ...], queue: int, tag: str) -> list[tuple[str, ...]]:
        return [
            ("-p", "tcp", "--dport", str(p), "-m", "comment", "--comment", tag, *_queue_target(queue)) for p in ports
        ]

    def add_queue(self, ports: tuple[int, ...], queue: int, tag: str) -> None:
        """The traffic to ``ports`` handed to NFQUEUE ``queue`` (the queue handler bound to it)."""
        self._append(self._queue_specs(ports, queue, tag))

    def remove_queue(self, ports: tuple[int, ...], queue: int, tag: str) -> None:
        self._delete(self._queue_specs(ports, queue, tag))

    def rule_counters(self, tag: str) -> Counters | None:
        """Packets and bytes the rules tagged ``tag`` matched; None when none is listed."""
        listed = [
            ln
            for ln in self.run(_need("iptables"), "-L", CHAIN, "-v", "-x", "-n", check=False).splitlines()
            if f"/* {tag} */" in ln
        ]
        if not listed:
            return None
        rows = [ln.split() for ln in listed]
        return Counters(sum(int(r[0]) for r in rows), sum(int(r[1]) for r in rows))

    # ---- the loopback's MTU ------------------------------------------------------------------
    def mtu(self) -> int:
        out = self.run("ip", "-o", "link", "show", "dev", "lo")
        m = re.search(r"\bmtu (\d+)", out)
        if m is None:
            raise FaultNotApplied(f"no MTU for lo in {self.path}: {out.strip()[:200]}")
        return int(m.group(1))

    def set_mtu(self, mtu: int) -> None:
        """The namespace's loopback MTU: TCP's segments follow it at their next send."""
        self.run("ip", "link", "set", "dev", "lo", "mtu", str(mtu))

    # ---- tc ------------------------------------------------------------------------------------
    def _root(self) -> None:
        tc = _need("tc")
        if "qdisc htb 1:" not in self.run(tc, "qdisc", "show", "dev", "lo"):
            self.run(
                tc, "qdisc", "add", "dev", "lo", "root", "handle", "1:", "htb"
            )  # default 0: unclassified passes unshaped

    def add_shaping(self, ports: tuple[int, ...], rate_kbit: int, minor: int) -> None:
        """A class 1:``minor`` at ``rate_kbit`` for the traffic to ``ports``."""
        tc = _need("tc")
        self._root()
        burst = max(1600, rate_kbit * 1000 // 8 // 10)  # a tenth of a second of the rate, at least a packet
        self.run(
            tc,
            "class",
            "add",
            "dev",
            "lo",
            "parent",
            "1:",
            "classid",
            f"1:{minor:x}",
            "htb",
            "rate",
            f"{rate_kbit}kbit",
            "ceil",
            f"{rate_kbit}kbit",
            "burst",
            str(burst),
        )
        for p in ports:
            self.run(
                tc,
                "filter",
                "add",
                "dev",
                "lo",
                "parent",
                "1:",
                "protocol",
                "ip",
                "prio",
                str(minor),
                "u32",
                "match",
                "ip",
                "dport",
                str(p),
                "0xffff",
                "flowid",
                f"1:{minor:x}",
            )

    def remove_shaping(self, minor: int) -> None:
        tc = _need("tc")
        self.run(tc, "filter", "del", "dev", "lo", "parent", "1:", "prio", str(minor), check=False)
        self.run(tc, "class", "del", "dev", "lo", "classid", f"1:{minor:x}", check=False)

    def shaped(self, minor: int) -> Counters | None:
        """What class 1:``minor`` has sent; None when it does not exist."""
        out = self.run(_need("tc"), "-s", "class", "show", "dev", "lo", check=False)
        m = re.search(rf"class htb 1:{minor:x} .*?\n\s*Sent (\d+) bytes (\d+) pkt", out)
        return Counters(int(m.group(2)), int(m.group(1))) if m else None

    def filters(self, minor: int) -> int:
        """How many filters steer traffic into class 1:``minor``."""
        out = self.run(_need("tc"), "filter", "show", "dev", "lo", check=False)
        return len(re.findall(rf"flowid 1:{minor:x}\b", out))
