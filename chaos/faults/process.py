"""Process faults through the target: kill (SIGKILL), terminate (SIGTERM: a graceful
shutdown), freeze (SIGSTOP; on Compose the cgroup freezer), restart."""

from __future__ import annotations

import time

from chaos.errors import FaultNotApplied, FaultNotHealed, TargetError
from chaos.faults.base import Fault
from chaos.system.topology import is_engine
from chaos.system.wait import wait_until
from chaos.targets.base import Target

__all__ = ["Freeze", "Kill", "Restart", "Terminate"]


class _ServiceFault(Fault):
    """A fault on one service's process: it strikes that service if it is an engine."""

    service: str

    @property
    def implicates(self) -> tuple[str, ...]:
        return (self.service,) if is_engine(self.service) else ()


def _start_again(target: Target, service: str) -> None:
    """Start a service that is down; a start that fails is a heal that failed."""
    try:
        target.start(service)
    except TargetError as exc:
        raise FaultNotHealed(str(exc)) from exc


class Kill(_ServiceFault):
    """SIGKILL a service. Healing starts it again (with the same command) if it is down."""

    kind = "kill"

    def __init__(self, target: Target, service: str) -> None:
        self.target, self.service = target, service

    def describe(self) -> str:
        return f"SIGKILL {self.service}"

    def inject(self) -> None:
        self.target.kill(self.service)

    def verify(self) -> str:
        if self.target.is_running(self.service):
            raise FaultNotApplied(f"{self.service} is still running after SIGKILL")
        return f"{self.service} is gone"

    def heal(self) -> None:
        if not self.target.is_running(self.service):
            self.target.start(self.service)

    def verify_healed(self) -> str:
        if not self.target.is_running(self.service):
            raise FaultNotHealed(f"{self.service} is not running after restart")
        return f"{self.service} restarted and ready"


class Terminate(_ServiceFault):
    """SIGTERM a service, as a rolling restart does, and let it drain. Healing waits up to
    ``drain_s`` for it to exit on its own (how long it took is the heal's evidence), stops it
    if it did not, and starts it again."""

    kind = "terminate"

    def __init__(self, target: Target, service: str, *, drain_s: float) -> None:
        self.target, self.service, self.drain_s = target, service, drain_s
        self._sent = 0.0
        self._exit = ""

    def describe(self) -> str:
        return f"SIGTERM {self.service}"

    def inject(self) -> None:
        self.target.terminate(self.service)
        self._sent = time.monotonic()

    def verify(self) -> str:
        return f"SIGTERM sent; {self.service} {'draining' if self.target.is_running(self.service) else 'already gone'}"

    def heal(self) -> None:
        try:
            wait_until(
                lambda: not self.target.is_running(self.service),
                timeout_s=self.drain_s,
                what=f"{self.service} exits after SIGTERM",
            )
            self._exit = f"exited {time.monotonic() - self._sent:.1f}s after SIGTERM"
        except TargetError:
            self._exit = f"still running {self.drain_s:g}s after SIGTERM: stopped"
            self.target.stop(self.service)
        _start_again(self.target, self.service)

    def verify_healed(self) -> str:
        if not self.target.is_running(self.service):
            raise FaultNotHealed(f"{self.service} is not running after its restart")
        return f"{self.service} {self._exit}; started again and ready"


class Freeze(_ServiceFault):
    """Freeze a service (sockets stay open, nothing answers); healing thaws it."""

    kind = "freeze"

    def __init__(self, target: Target, service: str) -> None:
        self.target, self.service = target, service

    def describe(self) -> str:
        return f"freeze {self.service}"

    def inject(self) -> None:
        self.target.freeze(self.service)

    def verify(self) -> str:
        if not self.target.is_frozen(self.service):
            raise FaultNotApplied(f"{self.service} is not frozen after the freeze")
        return f"{self.service} frozen"

    def heal(self) -> None:
        if self.target.is_running(self.service) and self.target.is_frozen(self.service):
            self.target.thaw(self.service)

    def verify_healed(self) -> str:
        if self.target.is_running(self.service) and self.target.is_frozen(self.service):
            raise FaultNotHealed(f"{self.service} is still frozen after the thaw")
        return f"{self.service} running"


class Restart(_ServiceFault):
    """Stop and start a service with the same command; verified by its readiness."""

    kind = "restart"

    def __init__(self, target: Target, service: str) -> None:
        self.target, self.service = target, service
        self._done = False

    def describe(self) -> str:
        return f"restart {self.service}"

    def inject(self) -> None:
        self.target.restart(self.service)
        self._done = True

    def verify(self) -> str:
        if not (self._done and self.target.is_running(self.service)):
            raise FaultNotApplied(f"{self.service} did not come back after restart")
        return f"{self.service} restarted and ready"

    def heal(self) -> None:
        if not self.target.is_running(self.service):
            _start_again(self.target, self.service)

    def verify_healed(self) -> str:
        if not self.target.is_running(self.service):
            raise FaultNotHealed(f"{self.service} is not running")
        return f"{self.service} running"
