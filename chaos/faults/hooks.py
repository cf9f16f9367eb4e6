"""SGLang's own failure hooks as a fault: the engines fail rooms at random, from their start.

``SGLANG_TEST_DISAGG_FAILURE_PROB`` and ``SGLANG_TEST_DISAGG_KV_CHECKSUM_MISMATCH_PROB``
(``chaos.targets.stack.FailureHooks``) are read at every use, so they are set in the engines'
environment when a stack of a module's own starts, and hold for its whole life. This fault
brackets the requests judged under them, as ``ClientFault`` brackets a workload's own chaos,
and proves they are on where it can: in each engine process's own environment.
"""

from __future__ import annotations

import psutil

from chaos.errors import FaultNotApplied
from chaos.faults.base import Fault
from chaos.faults.started import read_started
from chaos.targets.base import ENGINES, Target
from chaos.targets.stack import FailureHooks

__all__ = ["EngineHooks"]


class EngineHooks(Fault):
    kind = "hooks"

    def __init__(self, target: Target) -> None:
        self.target = target
        self.hooks = FailureHooks(**target.info.config.get("hooks", {}))

    @property
    def implicates(self) -> tuple[str, ...]:
        return ENGINES  # both engines fail rooms of their own

    def describe(self) -> str:
        shown = ", ".join(f"{var}={value}" for var, value in self.hooks.to_env().items()) or "none set"
        return f"the engines' own failure hooks ({shown}), on since their start"

    def inject(self) -> None:
        """Nothing to do: the engines started with the hooks."""

    def verify(self) -> str:
        """Each engine process's environment holds the hooks' variables, where this host can
        read it; a stack started without hooks is a rig error, not a run that tested them."""
        want = self.hooks.to_env()
        if not want:
            raise FaultNotApplied("the stack's engines were started without SGLang's failure hooks")
        seen = []
        for engine in self.target.info.topology.engines:
            pid, env = read_started(self.target, engine, "environment", psutil.Process.environ)
            wrong = {var: env.get(var) for var, value in want.items() if env.get(var) != value}
            if wrong:
                raise FaultNotApplied(f"{engine} (pid {pid}) started without the hooks: {wrong}")
            seen.append(f"{engine} pid {pid}")
        return f"{', '.join(sorted(want))} in the environment of {', '.join(seen)}"

    def heal(self) -> None:
        """Nothing to undo: the hooks last as long as the engines."""

    def verify_healed(self) -> str:
        return "the block ended; the hooks stay on with the engines of this stack"
