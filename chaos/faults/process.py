"""Process faults through the target: kill (SIGKILL), freeze (SIGSTOP; on Compose the
cgroup freezer), restart."""

from __future__ import annotations

from chaos.errors import FaultNotApplied, FaultNotHealed, TargetError
from chaos.faults.base import Fault
from chaos.targets.base import Target

__all__ = ["Freeze", "Kill", "Restart"]


class Kill(Fault):
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


class Freeze(Fault):
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


class Restart(Fault):
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
            try:
                self.target.start(self.service)
            except TargetError as exc:
                raise FaultNotHealed(str(exc)) from exc

    def verify_healed(self) -> str:
        if not self.target.is_running(self.service):
            raise FaultNotHealed(f"{self.service} is not running")
        return f"{self.service} running"
