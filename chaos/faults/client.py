"""Faults the clients commit themselves (hanging up, giving up, falling silent): bracketed
like any fault.

The workload performs them; these faults mark the window in the history, so that verdicts
relative to "the fault" and "the heal" apply to client-made chaos too.
"""

from __future__ import annotations

from chaos.errors import FaultNotApplied, FaultNotHealed
from chaos.faults.base import Fault
from chaos.observe.history import History

__all__ = ["ClientFault", "Idle"]


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


class Idle(Fault):
    """No request for ``seconds``, from a moment none is open: every keep-alive, connection
    pool and transport lane in the path that expires sooner expires (SGLang's HTTP server
    closes an idle connection after 5 s, smg's pool after 50 s; Mooncake#4209's TCP lanes
    misbehave after about 5 s). The silence is proven from the history: an idle that began
    with a request open, or that a request broke, did not happen."""

    kind = "idle"

    def __init__(self, history: History, seconds: float) -> None:
        self.history = history
        self.seconds = seconds
        self._began = 0.0

    @property
    def figures(self) -> dict[str, float]:
        return {"idle_s": self.seconds}

    def describe(self) -> str:
        return f"no request for {self.seconds:g}s"

    def inject(self) -> None:
        self._began = self.history.now()

    def verify(self) -> str:
        open_ops = [o.invoke.op for o in self.history.ops() if o.complete is None]
        if open_ops:
            raise FaultNotApplied(f"{len(open_ops)} request(s) still open as the idle began: {', '.join(open_ops[:5])}")
        return "no request open"

    def heal(self) -> None:
        """Nothing to undo: the next request ends the silence."""

    def verify_healed(self) -> str:
        sent = [o.invoke.op for o in self.history.ops() if o.invoke.t >= self._began]
        if sent:
            raise FaultNotHealed(f"the idle was broken by {len(sent)} request(s): {', '.join(sent[:5])}")
        return f"no request for {self.history.now() - self._began:.1f}s"
