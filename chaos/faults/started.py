"""What a service's process started with, read on this host: the proof of a fault that is
set when the stack starts and lasts as long as its engines (SGLang's failure hooks in their
environment, decode's page size in its command line)."""

from __future__ import annotations

from typing import Callable, TypeVar

import psutil

from chaos.errors import FaultNotApplied
from chaos.targets.base import Target

__all__ = ["read_started"]

T = TypeVar("T")


def read_started(target: Target, service: str, what: str, read: Callable[[psutil.Process], T]) -> tuple[int, T]:
    """``service``'s main pid and ``read`` of its process (``what`` it reads, for the
    error). A process this host cannot read leaves the fault unproven: ``FaultNotApplied``."""
    pid = target.main_pid(service)
    if pid is None:
        raise FaultNotApplied(f"{service}'s process cannot be read on this host: its {what} is unproven")
    try:
        return pid, read(psutil.Process(pid))
    except psutil.Error as exc:
        raise FaultNotApplied(f"{service}'s {what} (pid {pid}) cannot be read: {exc}") from exc
