"""Faults on a link no proxy can sit on: packet rules and shaping in the stack's own network
namespace (``chaos.system.netns``), the way Chaos Mesh's NetworkChaos and Pumba break a pod's links.

A link is named as everywhere else (``kv``, ``control``); the target says which namespace it
lives in and which ports its connections are made to *now* (``PacketLinks.packet_link``: real
engines pick them at start, so they are read again at each injection). Verification is the
rules read back from the kernel and, for a fault that blocks connections, one connect probe
made inside the namespace, which the rules must stop the way the fault says; the heal reads
the counters (how much traffic the fault met), removes the rules or the class, and checks
that the kernel lists none of them.
"""

from __future__ import annotations

import itertools
import sys
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from chaos.errors import FaultNotApplied, FaultNotHealed
from chaos.faults.base import Fault
from chaos.system.netns import MODES, Counters, Namespace
from chaos.targets.base import ENGINES

__all__ = ["LinkFault", "PacketFault", "PacketLink", "PacketLinks"]

_PROBE_S = 1.0
_PROBE = """
import socket, sys
try:
    socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=float(sys.argv[2])).close()
    print("connected")
except socket.timeout:
    print("timeout")
except ConnectionRefusedError:
    print("refused")
except OSError as exc:
    print(f"error {exc.errno}")
"""
_EXPECT = {"blackhole": "timeout", "reset": "refused", "refuse": "refused"}
_minors = itertools.count(0x10)


@dataclass(frozen=True)
class PacketLink:
    """Where a link's connections go now: the namespace they live in and the ports they are
    made to (what the link's traffic is keyed on)."""

    namespace: Namespace
    ports: tuple[int, ...]
    what: str  # which sockets those ports are, for the evidence ("decode's Mooncake TCP transport 16331")


@runtime_checkable
class PacketLinks(Protocol):
    """A target whose engine-to-engine links are broken by packet rules."""

    packet_links: tuple[str, ...]

    def packet_link(self, link: str) -> PacketLink: ...


class LinkFault(Fault):
    """A fault on an engine-to-engine link: one of ``MODES`` (blackhole, reset, refuse), or
    with ``rate_kbit`` a crawl. ``how`` says by what means, for its description."""

    how = ""

    def __init__(self, link: str, *, mode: str = "", rate_kbit: int | None = None) -> None:
        if (mode in MODES) == (rate_kbit is not None):
            raise ValueError(
                f"a link fault is one of {', '.join(MODES)} or a crawl (rate_kbit), not mode={mode!r} rate_kbit={rate_kbit}"
            )
        self.link, self.mode, self.rate_kbit = link, mode, rate_kbit

    @property
    def implicates(self) -> tuple[str, ...]:
        return ENGINES  # both ends of a link between the engines

    def describe(self) -> str:
        what = f"crawl at {self.rate_kbit} kbit/s" if self.rate_kbit is not None else self.mode
        return f"{what} on {self.link} ({self.how})"


class PacketFault(LinkFault):
    """A link fault by packet rules (``mode``) or an htb class (a crawl) in the namespace the
    target names."""

    kind = "packet"
    how = "packet rules"

    def __init__(
        self, target: PacketLinks, link: str, *, mode: str = "", rate_kbit: int | None = None, minor: int | None = None
    ) -> None:
        super().__init__(link, mode=mode, rate_kbit=rate_kbit)
        self.target = target
        self.minor = next(_minors) if minor is None else minor
        self.tag = f"pdchaos-{link}-{self.minor:x}"
        self._at: PacketLink | None = None
        self._met: Counters | None = None

    @property
    def at(self) -> PacketLink:
        if self._at is None:
            raise FaultNotApplied(f"{self.describe()} was never injected")
        return self._at

    def inject(self) -> None:
        self._at = self.target.packet_link(self.link)
        if self.rate_kbit is not None:
            self._at.namespace.add_shaping(self._at.ports, self.rate_kbit, self.minor)
        else:
            self._at.namespace.add_rules(self.mode, self._at.ports, self.tag)

    def to_state(self) -> dict[str, Any]:
        """What another process needs to find this fault again (``pdchaos link``)."""
        at = self.at
        return {
            "link": self.link,
            "mode": self.mode,
            "rate_kbit": self.rate_kbit,
            "minor": self.minor,
            "pid": at.namespace.pid,
            "ports": list(at.ports),
            "what": at.what,
        }

    @classmethod
    def from_state(cls, target: PacketLinks, state: dict[str, Any]) -> "PacketFault":
        """The fault ``to_state`` described, as injected: its rules and class where it put them."""
        fault = cls(target, state["link"], mode=state["mode"], rate_kbit=state["rate_kbit"], minor=state["minor"])
        fault._at = PacketLink(Namespace(state["pid"]), tuple(state["ports"]), state["what"])
        return fault

    def met(self) -> Counters | None:
        """The traffic the fault has met so far; None when the kernel lists none of it."""
        ns = self.at.namespace
        return ns.shaped(self.minor) if self.rate_kbit is not None else ns.rule_counters(self.tag)

    def _probe(self, port: int) -> str:
        return self.at.namespace.run(sys.executable, "-c", _PROBE, str(port), str(_PROBE_S), check=False).strip()

    def verify(self) -> str:
        ns, ports = self.at.namespace, self.at.ports
        where = f"{self.at.what} in {ns.path}"
        if self.rate_kbit is not None:
            if ns.shaped(self.minor) is None or ns.filters(self.minor) != len(ports):
                raise FaultNotApplied(
                    f"class 1:{self.minor:x} or its {len(ports)} filters not listed on lo in {ns.path}"
                )
            return f"htb class 1:{self.minor:x} at {self.rate_kbit} kbit/s, filters on the traffic to ports {list(ports)} ({where})"
        if ns.rule_counters(self.tag) is None:
            raise FaultNotApplied(f"no rule tagged {self.tag} listed in {ns.path}")
        got = self._probe(ports[0])
        if got != _EXPECT[self.mode]:
            raise FaultNotApplied(
                f"a connect to {ports[0]} through {self.mode} rules got {got!r}, expected {_EXPECT[self.mode]!r}"
            )
        return f"{self.mode} rules tagged {self.tag} on ports {list(ports)} ({where}); probe: connect {got}"

    def heal(self) -> None:
        if self._at is None:
            return
        ns = self._at.namespace
        self._met = self.met() or self._met
        if self.rate_kbit is not None:
            ns.remove_shaping(self.minor)
        else:
            ns.remove_rules(self.mode, self._at.ports, self.tag)

    def verify_healed(self) -> str:
        ns = self.at.namespace
        if self.rate_kbit is not None:
            if ns.shaped(self.minor) is not None or ns.filters(self.minor):
                raise FaultNotHealed(f"class 1:{self.minor:x} or its filters still listed in {ns.path}")
        elif ns.rule_counters(self.tag) is not None:
            raise FaultNotHealed(f"rules tagged {self.tag} still listed in {ns.path}")
        return f"none listed in {ns.path}; while active it met {self._met or 'nothing (no counter read)'}"
