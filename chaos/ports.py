"""Choosing port bases so that stacks never collide: per xdist worker, per stack, per run.

Every default range lies below 32768, outside Linux's ephemeral range (32768-60999), where
any outgoing connection could take a port a stack is about to listen on."""

from __future__ import annotations

import itertools
import os
import socket

from chaos.errors import ConfigError
from chaos.stack import LOOPBACK, PortPlan

__all__ = ["PortAllocator", "ensure_free", "ports_free"]

_STACKS_PER_WORKER = 40
_STRIDE = 16  # PortPlan uses 14 ports; room for two more


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
        self._start = first + index * _STACKS_PER_WORKER * _STRIDE
        self._next = itertools.count()

    def next_base(self) -> int:
        for _ in range(_STACKS_PER_WORKER):
            base = self._start + (next(self._next) % _STACKS_PER_WORKER) * _STRIDE
            if ports_free(PortPlan(base)):
                return base
        raise ConfigError(f"no free port range of {_STRIDE} ports above {self._start}")
