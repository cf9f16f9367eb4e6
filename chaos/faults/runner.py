"""A fault's lifecycle: a context manager around any ``Fault``, with triggers, always healed.
The menu suites call (``faults.kill(...)``, ``faults.blackhole(...)``) is ``chaos.faults.menu``.

On entry: wait for the trigger (with its deadline), inject, verify. On exit, whatever
happened (an exception, Ctrl-C): heal and verify the heal. Every step goes into the
history. ``heal_all()`` runs again at teardown for anything still active.
"""

from __future__ import annotations

import contextlib
import itertools
import time
from contextlib import contextmanager
from typing import Iterator

from chaos.errors import ConfigError, FaultNotHealed
from chaos.faults.base import Fault
from chaos.observe.history import History
from chaos.observe.records import HEAL_ONCE, FaultEvent, Stage
from chaos.observe.sampler import Sampler
from chaos.observe.triggers import Condition, poll_for, wait_for
from chaos.system.limits import activity
from chaos.targets.base import Target
from chaos.targets.toxiproxy import ToxiproxyClient

__all__ = ["DEFAULT_TRIGGER_DEADLINE_S", "FaultBlock", "FaultRunner"]

DEFAULT_TRIGGER_DEADLINE_S = 30.0
FaultBlock = contextlib.AbstractContextManager[Fault]  # a fault for a with block: injected on entry, healed on exit


class FaultRunner:
    """A fault's life in a test: its trigger, inject and verify, the hold, heal and verify,
    each step recorded; whatever is still active healed at teardown."""

    def __init__(self, target: Target, history: History, sampler: Sampler, toxiproxy: ToxiproxyClient | None) -> None:
        self.target, self.history, self.sampler, self._toxiproxy = target, history, sampler, toxiproxy
        self._active: list[tuple[str, Fault]] = []
        self._ids = itertools.count(1)

    @property
    def toxiproxy(self) -> ToxiproxyClient:
        if self._toxiproxy is None:
            raise ConfigError(
                "this target has no Toxiproxy in its path (endpoints.toxiproxy): network faults cannot be injected"
            )
        return self._toxiproxy

    def _record(self, fid: str, stage: Stage, fault: Fault, evidence: str = "") -> None:
        figures = fault.figures if stage is Stage.HEAL_VERIFIED else {}
        self.history.append(
            FaultEvent(
                self.history.now(),
                time.time(),
                fid,
                stage,
                fault.describe(),
                evidence,
                implicates=fault.implicates,
                action=fault.kind,
                figures={k: float(v) for k, v in figures.items() if isinstance(v, (int, float))},
            )
        )

    @contextmanager
    def apply(
        self,
        fault: Fault,
        *,
        when: Condition | None = None,
        deadline_s: float = DEFAULT_TRIGGER_DEADLINE_S,
        until: Condition | None = None,
        hold_s: float = 0.0,
    ) -> Iterator[Fault]:
        """Inject ``fault`` once ``when`` holds (within ``deadline_s``). When the block ends,
        heal it once ``until`` holds or ``hold_s`` has passed, whichever comes first: the
        heal waits for what the fault should cause (a queue drained by a watchdog, say),
        and a condition that never holds is for the verdicts to judge, not a rig error."""
        fid = f"{fault.kind}#{next(self._ids)}"
        if when is not None:
            with activity(f"trigger of {fid} {fault.describe()}"):
                wait_for(when, self.sampler, self.history, deadline_s=deadline_s)
        self._active.append((fid, fault))
        try:
            with activity(f"inject {fid} {fault.describe()}"):
                self._record(fid, Stage.INJECT, fault)
                fault.inject()
                self._record(fid, Stage.VERIFIED, fault, fault.verify())
            yield fault
            if until is not None:  # a condition that never holds is for the verdicts, not a rig error
                poll_for(until, self.sampler, self.history, deadline_s=hold_s, label=f"{HEAL_ONCE} {until.describe}")
        finally:
            self._heal(fid, fault)

    def _heal(self, fid: str, fault: Fault) -> None:
        if (fid, fault) not in self._active:
            return
        try:
            with activity(f"heal {fid} {fault.describe()}"):
                self._record(fid, Stage.HEAL, fault)
                fault.heal()
                self._record(fid, Stage.HEALED, fault)
                self._record(fid, Stage.HEAL_VERIFIED, fault, fault.verify_healed())
        except Exception as exc:
            self._record(fid, Stage.HEAL_FAILED, fault, str(exc))
            raise
        finally:
            self._active.remove((fid, fault))

    def wait(self, cond: Condition, *, deadline_s: float = DEFAULT_TRIGGER_DEADLINE_S) -> str:
        """Wait for a condition inside a fault block (recorded as a trigger)."""
        return wait_for(cond, self.sampler, self.history, deadline_s=deadline_s)

    def heal_all(self) -> None:
        """Heal everything still active, newest first; raise the first failure at the end."""
        first: Exception | None = None
        for fid, fault in reversed(list(self._active)):
            try:
                self._heal(fid, fault)
            except Exception as exc:
                first = first or exc
        if first is not None:
            raise FaultNotHealed(f"teardown could not heal every fault: {first}") from first
