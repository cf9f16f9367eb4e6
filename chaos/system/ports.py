"""One stack's ports (``PortPlan``: every port from one base), and choosing bases so that
stacks never collide: per xdist worker, per stack, per run.

Every default range lies below 32768, outside Linux's ephemeral range (32768-60999), where
any outgoing connection could take a port a stack is about to listen on."""

from __future__ import annotations

import itertools
import os
import socket
from dataclasses import dataclass
from pathlib import Path

from chaos.errors import ConfigError

__all__ = [
    "BASES",
    "LOOPBACK",
    "RUN_STRIDE",
    "STACK_PORTS",
    "STRIDE",
    "DecodePorts",
    "PortAllocator",
    "PortPlan",
    "PrefillPorts",
    "ensure_free",
    "ephemeral_overlap",
    "ports_free",
]

LOOPBACK = "127.0.0.1"
STACK_PORTS = 25  # consecutive ports of one stack, from its base (PortPlan): two engines of each kind

STRIDE = 32  # one stack's range: PortPlan uses STACK_PORTS (25)
_STACKS_PER_WORKER = 20  # ranges per pytest process (per xdist worker)
RUN_STRIDE = 2 * _STACKS_PER_WORKER * STRIDE  # one pytest process with two xdist workers: 1280 ports

# Where each user of ports starts by default, one range each, so that none collides with
# another running at the same time. Tests offset their own from --port-base (tests/ports.py).
BASES = {
    "bench-flake": 18000,
    "bench-suites": 19000,
    "bench-costs": 19500,
    "bench-throughput": 20500,
    "up": 21000,  # pdchaos up
    "pytest": 22000,  # pytest --port-base
    "conform": 24000,  # pdchaos conform: pdsim here, the real engine 100 above
    "mutants": 25000,  # pdchaos mutants: one RUN_STRIDE per concurrent run
    "explore": 28000,  # pdchaos explore: one run at a time
    "bench-explore": 29500,  # bench/explore_finds.py: one explore at a time
}


@dataclass(frozen=True)
class PrefillPorts:
    """One prefill engine's ports: where it serves, and the proxies decode reaches it by."""

    http: int
    bootstrap: int  # its bootstrap server
    bootstrap_proxy: int  # decode's way to it
    control: int  # pdsim's control link (SGLang picks its ZMQ port itself)
    control_proxy: int
    dist: int  # SGLang's torch.distributed port (--nccl-port)


@dataclass(frozen=True)
class DecodePorts:
    """One decode engine's ports: where it serves, and the proxy prefills' KV reaches it by."""

    http: int
    kv: int  # pdsim's KV server (SGLang's Mooncake picks its ports itself)
    kv_proxy: int
    dist: int


@dataclass(frozen=True)
class PortPlan:
    """Every port of one stack, from one base, so stacks can run side by side. The first
    engine of each kind has the named ports below; a second one (``chaos.system.topology``)
    takes ports from ``base + 15`` (``prefill_at(1)``, ``decode_at(1)``)."""

    base: int

    def __post_init__(self) -> None:
        if not 1024 <= self.base <= 65535 - STACK_PORTS:
            raise ConfigError(f"port base {self.base} out of range 1024..{65535 - STACK_PORTS}")

    toxiproxy = property(lambda s: s.base)
    client_router = property(lambda s: s.base + 1)
    router = property(lambda s: s.base + 2)
    router_metrics = property(lambda s: s.base + 3)
    prefill = property(lambda s: s.base + 4)
    prefill_bootstrap = property(lambda s: s.base + 5)
    bootstrap = property(lambda s: s.base + 6)
    prefill_control = property(lambda s: s.base + 7)
    control = property(lambda s: s.base + 8)
    decode = property(lambda s: s.base + 9)
    decode_kv = property(lambda s: s.base + 10)
    kv = property(lambda s: s.base + 11)
    prefill_dist = property(lambda s: s.base + 12)  # SGLang's torch.distributed port (--nccl-port)
    decode_dist = property(lambda s: s.base + 13)
    # where no service listens: the address a hostile client names as its own bootstrap
    # server, watched by the rig's canary (chaos.observe.canary); the engines reach it on
    # the host's loopback, or through the bridge where they run in a namespace
    canary = property(lambda s: s.base + 14)

    def prefill_at(self, index: int) -> PrefillPorts:
        """The ports of prefill number ``index`` (from 0)."""
        if index == 0:
            return PrefillPorts(
                self.prefill,
                self.prefill_bootstrap,
                self.bootstrap,
                self.prefill_control,
                self.control,
                self.prefill_dist,
            )
        if index == 1:
            return PrefillPorts(*range(self.base + 15, self.base + 21))
        raise ConfigError(f"a stack's ports hold two prefills, not {index + 1}")

    def decode_at(self, index: int) -> DecodePorts:
        """The ports of decode number ``index`` (from 0)."""
        if index == 0:
            return DecodePorts(self.decode, self.decode_kv, self.kv, self.decode_dist)
        if index == 1:
            return DecodePorts(*range(self.base + 21, self.base + 25))
        raise ConfigError(f"a stack's ports hold two decodes, not {index + 1}")

    def all(self) -> list[int]:
        return list(range(self.base, self.base + STACK_PORTS))

    def as_env(self) -> dict[str, str]:
        """``PDCHAOS_PORT_<NAME>`` for each port: what compose/stack.yaml reads."""
        names = [n for n, v in vars(PortPlan).items() if isinstance(v, property)]
        return {f"PDCHAOS_PORT_{n.upper()}": str(getattr(self, n)) for n in names}


def ephemeral_overlap(base: int) -> str:
    """A warning when the range from ``base`` (up to a run's stride) overlaps the kernel's
    ephemeral ports, where an outgoing connection may take a port before a stack binds it
    (seen: a router's 'Address already in use' at base 33112); empty when it does not."""
    try:
        low, high = (int(x) for x in Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    except (OSError, ValueError):
        return ""
    if base + RUN_STRIDE <= low or base > high:
        return ""
    return f"port base {base} overlaps the kernel's ephemeral ports {low}-{high}: an outgoing connection may take a stack's port (choose a base below {low - RUN_STRIDE})"


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((LOOPBACK, port))
        except OSError:
            return False
    return True


def ports_free(plan: PortPlan) -> bool:
    return all(_port_free(p) for p in plan.all())


def ensure_free(plan: PortPlan) -> None:
    """Raise a ConfigError naming the busy ports of a plan, if any."""
    busy = [p for p in plan.all() if not _port_free(p)]
    if busy:
        raise ConfigError(f"ports {busy} on {LOOPBACK} are in use (another stack?); choose another --port-base")


class PortAllocator:
    """Hands out free port bases from a worker-private range above ``first``."""

    def __init__(self, first: int, worker: str | None = None) -> None:
        worker = worker if worker is not None else os.environ.get("PYTEST_XDIST_WORKER", "gw0")
        index = int(worker[2:]) if worker.startswith("gw") and worker[2:].isdigit() else 0
        self._start = first + index * _STACKS_PER_WORKER * STRIDE
        self._next = itertools.count()

    def next_base(self) -> int:
        for _ in range(_STACKS_PER_WORKER):
            base = self._start + (next(self._next) % _STACKS_PER_WORKER) * STRIDE
            if ports_free(PortPlan(base)):
                return base
        raise ConfigError(f"no free port range of {STRIDE} ports above {self._start}")
