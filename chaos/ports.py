"""Choosing port bases so that stacks never collide: per xdist worker, per stack, per run."""

from __future__ import annotations

import itertools
import os

from chaos.errors import ConfigError
from chaos.stack import PortPlan
from chaos.targets.embedded import ports_free

__all__ = ["PortAllocator"]

_STACKS_PER_WORKER = 40
_STRIDE = 12


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
