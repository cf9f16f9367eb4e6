"""Faults the clients commit themselves (hanging up, giving up): bracketed like any fault.

The workload performs them; this fault only marks the window in the history, so that
verdicts relative to "the fault" and "the heal" apply to client-made chaos too.
"""

from __future__ import annotations

from chaos.faults.base import Fault

__all__ = ["ClientFault"]


class ClientFault(Fault):
    kind = "client"

    def __init__(self, description: str) -> None:
        self._description = description

    def describe(self) -> str:
        return self._description

    def inject(self) -> None:
        """Nothing to do: the workload inside the block is the fault."""

    def verify(self) -> str:
        return "performed by the workload inside the block"

    def heal(self) -> None:
        """Nothing to undo: the clients are gone when the block ends."""

    def verify_healed(self) -> str:
        return "the block ended"
