"""Choosing port bases so that stacks never collide: per xdist worker, per stack, per run.

Every default range lies below 32768, outside Linux's ephemeral range (32768-60999), where
any outgoing connection could take a port a stack is about to listen on."""

from __future__ import annotations

import itertools
import os
import socket
from pathlib import Path

from chaos.errors import ConfigError
from chaos.stack import LOOPBACK, PortPlan

__all__ = ["BASES", "RUN_STRIDE", "STRIDE", "PortAllocator", "ensure_free", "ephemeral_overlap", "ports_free"]

STRIDE = 16  # one stack's range: PortPlan uses STACK_PORTS (14); room for two more
_STACKS_PER_WORKER = 40  # ranges per pytest process (per xdist worker)
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
