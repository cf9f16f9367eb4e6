"""Stacks for a test session: started on free ports with chosen overrides, all stopped at
the end whatever happened. On an attached deployment it hands out that deployment as it is."""

from __future__ import annotations

import os
import shutil
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any, Iterator

from chaos.run.skips import SkipKind, skip
from chaos.system.cleanup import register, shielded, unregister
from chaos.system.limits import activity
from chaos.system.ports import PortAllocator
from chaos.system.topology import Topology
from chaos.targets.base import START_FAILURE, Target
from chaos.targets.registry import TargetChoice
from chaos.targets.stack import StackConfig, Timeouts

__all__ = ["StackFactory", "session_defects"]


def session_defects() -> str:
    """The pdsim defects this session runs with (``PDSIM_DEFECTS``: how the kill matrix
    switches one on for every stack a run starts)."""
    return os.environ.get("PDSIM_DEFECTS", "")


class StackFactory:
    """Starts stacks of the chosen target on free ports with chosen overrides (the session's,
    then the caller's); stops all of them at the end. On an attached deployment it hands out that deployment, as it is."""

    def __init__(
        self,
        choice: TargetChoice,
        port_base: int,
        state_root: Path,
        *,
        worker: str | None = None,
        record_dir: Path | None = None,
        overrides: dict[str, Any] | None = None,
    ) -> None:
        self.choice = choice
        self._overrides = overrides or {}  # the session's choices for every stack (--kv-checksum)
        self._ports = PortAllocator(port_base, worker)
        self._root = state_root
        self._stacks: list[Target] = []
        self._record_dir = record_dir  # where each started stack's stack.json is kept for the run's report

    def start(self, *, defects: str = "", timeouts: Timeouts | None = None, **overrides: Any) -> Target:
        if not self.choice.starts_stacks:
            if defects or timeouts is not None or overrides or self._overrides:
                skip(
                    SkipKind.TARGET,
                    f"target {self.choice.name} cannot start a stack with defects, timeouts or other overrides",
                )
            return self.choice.start(StackConfig())
        topology = (self._overrides | overrides).get("topology")
        if topology is not None and topology != Topology() and not self.choice.runs_topologies:
            skip(SkipKind.TARGET, f"target {self.choice.name} runs one engine of each kind, not {topology}")
        base = self._ports.next_base()
        cfg = StackConfig(port_base=base, state_dir=self._root / f"stack-{base}", defects=defects)
        if timeouts is not None:
            cfg = replace(cfg, timeouts=timeouts)
        register(cfg.state_dir)
        try:
            with activity(f"stack start ({self.choice.name}, port base {base})"):
                stack = self.choice.start(replace(cfg, **(self._overrides | overrides)))
        except BaseException:  # a failed or interrupted start stops what it began: forget it
            with shielded():
                unregister(cfg.state_dir)
                self._keep_start_failure(cfg.state_dir / START_FAILURE, base)
            raise
        self._stacks.append(stack)
        if self._record_dir is not None:  # what ran (target, ports, images by digest), outliving the stack
            self._record_dir.mkdir(parents=True, exist_ok=True)
            (self._record_dir / f"{stack.info.kind}-{stack.info.port_base}.json").write_text(stack.info.to_json())
        return stack

    def _keep_start_failure(self, evidence: Path, base: int) -> None:
        """A stack that did not start left its containers' logs and states (``START_FAILURE``):
        into the run's report, where summary.md names the service that failed."""
        if self._record_dir is not None and evidence.is_dir():
            shutil.copytree(evidence, self._record_dir / f"start-failed-{self.choice.name}-{base}", dirs_exist_ok=True)

    @contextmanager
    def own(self, **overrides: Any) -> Iterator[Target]:
        """A stack of a suite module's own (other timeouts, a smaller engine, the router's
        limits), with the session's pdsim defects so the kill matrix reaches it too; stopped
        when the block ends."""
        stack = self.start(defects=session_defects(), **overrides)
        try:
            yield stack
        finally:
            self.stop(stack)

    def stop(self, stack: Target) -> None:
        if stack in self._stacks:
            self._stacks.remove(stack)
            with shielded():
                stack.down()
                unregister(Path(stack.info.state_dir))
                self.choice.stopped(stack)

    def stop_all(self) -> None:
        errors = []
        with shielded():  # a second Ctrl-C must not cut the teardown short
            while self._stacks:
                stack = self._stacks.pop()
                try:
                    stack.down()
                    unregister(Path(stack.info.state_dir))
                    self.choice.stopped(stack)
                except Exception as exc:  # keep stopping the others
                    errors.append(exc)
        if errors:
            raise errors[0]
