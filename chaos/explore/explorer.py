"""Running schedules: each its scenario file (``chaos.explore.render``), a few at a time in
one pytest process on one fresh stack until the first that does not pass (``-x``), each
episode's state read back from the run's results (``chaos.explore.episode.classify``)."""

from __future__ import annotations

import os
import shutil
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

from chaos.errors import ConfigError
from chaos.explore.episode import Episode, classify
from chaos.explore.render import function_name, render
from chaos.explore.schedule import Schedule
from chaos.run.pytest_run import run_pytest
from chaos.run.results import load_results
from chaos.system.topology import Topology
from chaos.targets.base import Capability
from chaos.targets.registry import TargetChoice

__all__ = ["Explorer"]


@dataclass
class Explorer:
    """Runs schedules on ``target``, one pytest process each, under ``out``."""

    target: str
    seed: int
    out: Path
    caps: frozenset[Capability]
    port_base: int
    env: dict[str, str]
    args: list[str] = field(default_factory=list)  # more for pytest (an attached stack's file)
    topology: Topology = field(default_factory=Topology)  # the engines of every episode's stack
    timeout_s: float = 600.0

    @classmethod
    def of(
        cls,
        choice: TargetChoice,
        *,
        seed: int,
        out: Path,
        port_base: int,
        defects: str = "",
        topology: Topology | None = None,
    ) -> Explorer:
        """An explorer of ``choice`` (an attached stack's file and consent passed on to each
        episode's pytest), with ``defects`` planted in pdsim, on stacks of ``topology``."""
        topology = topology or Topology()
        if topology != Topology() and not choice.runs_topologies:
            raise ConfigError(f"target {choice.name} runs one engine of each kind, not {topology}")
        args = ["--topology", topology.name] if topology != Topology() else []
        if choice.stack_file is not None:
            args += ["--stack-file", str(Path(choice.stack_file).resolve())]
        if choice.allow_destructive:
            args.append("--allow-destructive")
        env = {**os.environ, "PDSIM_DEFECTS": defects}
        return cls(choice.name, seed, out, choice.capabilities(), port_base, env, args, topology=topology)

    def run(self, schedule: Schedule, *, folder: str, note: str = "", tag: str = "") -> Episode:
        """``schedule`` alone, on a fresh stack: a shrink candidate, a rerun, a reproducer."""
        return self.run_batch([schedule], folder=folder, note=note, tag=tag)[0]

    def run_batch(self, schedules: list[Schedule], *, folder: str, note: str = "", tag: str = "") -> list[Episode]:
        """``schedules`` in order in one pytest process on one fresh stack, until the first
        that does not pass: the episodes run, that one last (never empty: a process that
        ran none gives its first a rig error)."""
        where = self.out / folder
        where.mkdir(parents=True, exist_ok=True)
        names = [s.name() + tag for s in schedules]
        files = [where / f"test_{name}.py" for name in names]
        for schedule, file in zip(schedules, files, strict=True):
            file.write_text(render(schedule, note=note))
        batch = names[0] if len(names) == 1 else f"{names[0]}-{names[-1]}"
        reports = where / "reports" / batch
        shutil.rmtree(reports, ignore_errors=True)  # an earlier run into the same folder is not this one's result
        t0 = time.monotonic()
        rc = run_pytest(
            files,
            port_base=self.port_base,
            reports=reports,
            log=where / f"{batch}.log",
            env=self.env,
            args=["--target", self.target, "--seed", str(self.seed), "-x", *self.args],
            timeout_s=self.timeout_s * len(files),
        )
        results = load_results(reports)
        took = _durations(reports)
        episodes: list[Episode] = []
        for schedule, file in zip(schedules, files, strict=True):
            test = function_name(schedule)
            mine = [r for r in results if r.test.endswith("::" + test)]
            if not mine and episodes:
                break  # not run: the process stopped at the episode before
            state, found, known, why = classify(schedule, mine[0] if mine else None, self.caps, rc=rc)
            seconds = took.get(test, time.monotonic() - t0)
            episodes.append(Episode(schedule, state, file, round(seconds, 1), found, known, why))
            if state != "passed":
                break
        return episodes


def _durations(reports: Path) -> dict[str, float]:
    """Each test's seconds in the run's JUnit XML (the first one's include starting the
    stack), by test function name."""
    out: dict[str, float] = {}
    for junit in reports.rglob("junit.xml"):
        for case in ET.parse(junit).iter("testcase"):
            out[case.get("name", "")] = float(case.get("time") or 0.0)
    return out
