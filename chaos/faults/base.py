"""The shape every fault shares.

``inject`` does it, ``verify`` proves it took effect (or raises ``FaultNotApplied`` with
what it saw), ``heal`` undoes it and must be idempotent (the runner heals again at
teardown), ``verify_healed`` proves the heal (or raises ``FaultNotHealed``). A fault that
silently did nothing is the worst failure of a chaos suite.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

__all__ = ["Fault"]


class Fault(ABC):
    kind: str = "fault"

    @property
    def implicates(self) -> tuple[str, ...]:
        """The engines this fault strikes: the workers smg may rightly charge with the
        failures it causes (``v.charged_only_where_struck``). None by default: a client's
        own errors, a broken client link or a restarted router strike no engine."""
        return ()

    @property
    def figures(self) -> dict[str, Any]:
        """What the fault did, as it counted it (packets held, bytes corrupted): recorded at
        its heal (``FaultEvent.figures``), where a premise can ask whether it did anything.
        Empty by default: most faults count nothing of their own."""
        return {}

    @abstractmethod
    def describe(self) -> str: ...

    @abstractmethod
    def inject(self) -> None: ...

    @abstractmethod
    def verify(self) -> str:
        """Evidence that the fault is in effect; raise FaultNotApplied otherwise."""

    @abstractmethod
    def heal(self) -> None: ...

    @abstractmethod
    def verify_healed(self) -> str:
        """Evidence that the fault is gone; raise FaultNotHealed otherwise."""
