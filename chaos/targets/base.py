"""The one interface every target implements, and the capabilities a target may lack.

A local-process target (the embedded stack) implements it now; a Docker Compose target
and an attach-to-an-existing-deployment target fit beside it, each in its own module.
"""

from __future__ import annotations

import enum
from typing import Protocol, runtime_checkable

from chaos.stack import StackInfo

__all__ = ["Capability", "SERVICES", "Target"]

SERVICES = ("toxiproxy", "prefill", "decode", "router")


class Capability(enum.Enum):
    """What a test may need from a target; tests needing a missing one skip with a reason."""

    PROXIED_KV = "proxied_kv"  # KV bytes cross a Toxiproxy (never true for RDMA)
    PROXIED_CONTROL = "proxied_control"
    PROXIED_BOOTSTRAP = "proxied_bootstrap"
    PROCESS_CONTROL = "process_control"  # kill/freeze/restart services
    DEFECTS = "defects"  # engines honour PDSIM_DEFECTS (pdsim only)


@runtime_checkable
class Target(Protocol):
    """Start, stop, kill (SIGKILL), freeze (SIGSTOP), thaw and restart a service; read logs."""

    info: StackInfo
    capabilities: frozenset[Capability]

    def start(self, service: str) -> None: ...

    def stop(self, service: str) -> None: ...

    def kill(self, service: str) -> None: ...

    def freeze(self, service: str) -> None: ...

    def thaw(self, service: str) -> None: ...

    def restart(self, service: str) -> None: ...

    def is_running(self, service: str) -> bool: ...

    def is_frozen(self, service: str) -> bool: ...

    def logs(self, service: str) -> str: ...

    def down(self) -> None: ...
