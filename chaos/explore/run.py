"""Exploring: episode after episode of seeded schedules until the budget is spent; each
failed invariant that no known issue explains is a find, shrunk to a reproducer and re-run
to measure how often it reproduces.

Each episode is its schedule's scenario file (``chaos.explore.render``), and what explore
ran is the file it leaves. Episodes run a few at a time in one pytest process on one fresh
stack, as the suites share theirs, and the process stops at the first episode that does
not pass (``-x``): an episode only ever follows ones whose own verdicts proved the stack
serving and quiet, so no episode's damage judges the next; those not run go first in the
next batch, on a fresh stack. A stack and a process each cost about 8 s of a 15 to 20 s
episode on a 2-core machine. Shrinking and reruns run each file alone, as a user runs a
reproducer. Results are read from ``result.json`` (``chaos.run.results``): failures are
compared as data (``Signature``), never as text.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Collection, Iterator

from chaos.explore.budget import Budget
from chaos.explore.health import unhealthy
from chaos.explore.known import Known, known_for
from chaos.explore.render import function_name, render
from chaos.explore.schedule import Schedule, generate
from chaos.explore.shrink import shrink
from chaos.judge.model import Status
from chaos.run.pytest_run import TIMED_OUT, run_pytest
from chaos.run.results import JudgedVerdict, TestResult, load_results
from chaos.targets.base import Capability
from chaos.targets.registry import TargetChoice

__all__ = ["BATCH", "Budget", "Episode", "Explorer", "Find", "Signature", "explore"]

BATCH = 4  # episodes per pytest process and stack, at most
# A shrink candidate is kept only when it fails the same way this many runs in a row: one
# that failed once by luck of timing made reproducers that failed 2 of 5 reruns
CONFIRM = 2


@dataclass(frozen=True)
class Signature:
    """A failure as data: the invariant and the kind of its evidence (the names of the
    values it measured, and those of its values that are categories: outcomes, statuses).
    Two runs fail "the same way" when they share a signature."""

    kind: str
    keys: tuple[str, ...]
    categories: tuple[tuple[str, str], ...]

    @classmethod
    def of(cls, v: JudgedVerdict) -> Signature:
        values = v.evidence.values
        cats = sorted(
            (k, json.dumps(val, sort_keys=True))
            for k, val in values.items()
            if isinstance(val, str) or (isinstance(val, list) and all(isinstance(x, str) for x in val))
        )
        return cls(v.kind, tuple(sorted(values)), tuple(cats))

    def __str__(self) -> str:
        cats = ", ".join(f"{k}={val}" for k, val in self.categories)
        return self.kind + (f" [{cats}]" if cats else "")


@dataclass
class Episode:
    """One schedule run and judged. ``state``: passed, found (an invariant failed and no
    known issue explains it), known (only known issues failed), inconclusive (a verdict
    could not say), rig error (the rig broke: a trigger, a fault, the stack)."""

    schedule: Schedule
    state: str
    file: Path
    seconds: float
    findings: list[JudgedVerdict] = field(default_factory=list)
    known: list[tuple[JudgedVerdict, Known]] = field(default_factory=list)
    why: str = ""

    def signatures(self) -> set[Signature]:
        return {Signature.of(v) for v in self.findings}


@dataclass
class Find:
    episode: Episode
    signature: Signature
    reproducer: Path
    shrunk: Schedule
    candidates: int
    reproduced: int
    reruns: int
    after_s: float  # from explore's start until the episode that found it ended

    @property
    def flaky(self) -> bool:
        """Failed once, and in none of its reruns: reported apart, never as found."""
        return self.reruns > 0 and self.reproduced == 0


def classify(
    schedule: Schedule, result: TestResult | None, caps: Collection[Capability], *, rc: int
) -> tuple[str, list[JudgedVerdict], list[tuple[JudgedVerdict, Known]], str]:
    """An episode's state from its result: a rig error stays one whatever its verdicts say."""
    if result is None:
        return "rig error", [], [], "timed out" if rc == TIMED_OUT else f"no result (pytest exited {rc})"
    if result.outcome == "passed":
        return "passed", [], [], ""
    if result.outcome != "failed":
        return "rig error", [], [], (result.message.splitlines() or [result.outcome])[0][:300]
    failed = result.judged(Status.FAIL)
    known = [(v, k) for v in failed if (k := known_for(schedule, v, caps))]
    found = [v for v in failed if all(v is not kv for kv, _ in known)]
    if found:
        return "found", found, known, str(found[0])
    if known:
        return "known", [], known, f"{known[0][0].kind}: {known[0][1].component} {known[0][1].version}"
    unsure = result.unsure()
    return "inconclusive", [], [], str(unsure[0]) if unsure else result.message[:300]


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
    timeout_s: float = 600.0

    @classmethod
    def of(cls, choice: TargetChoice, *, seed: int, out: Path, port_base: int, defects: str = "") -> Explorer:
        """An explorer of ``choice`` (an attached stack's file and consent passed on to each
        episode's pytest), with ``defects`` planted in pdsim."""
        args = []
        if choice.stack_file is not None:
            args += ["--stack-file", str(Path(choice.stack_file).resolve())]
        if choice.allow_destructive:
            args.append("--allow-destructive")
        env = {**os.environ, "PDSIM_DEFECTS": defects}
        return cls(choice.name, seed, out, choice.capabilities(), port_base, env, args)

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


def _batch_size(budget: Budget, episodes: list[Episode], spent_s: float) -> int:
    """How many episodes the next process runs: ``BATCH``, fewer where the budget has fewer
    episodes left, or less time than they take at the mean episode time so far (at least
    one: the budget is not yet spent)."""
    if budget.episodes is not None:
        return max(1, min(BATCH, budget.episodes - len(episodes)))
    mean_s = sum(ep.seconds for ep in episodes) / len(episodes) if episodes else 20.0
    left_s = (budget.seconds or 0.0) - spent_s
    return max(1, min(BATCH, int(left_s // max(mean_s, 1.0))))


def _durations(reports: Path) -> dict[str, float]:
    """Each test's seconds in the run's JUnit XML (the first one's include starting the
    stack), by test function name."""
    out: dict[str, float] = {}
    for junit in reports.rglob("junit.xml"):
        for case in ET.parse(junit).iter("testcase"):
            out[case.get("name", "")] = float(case.get("time") or 0.0)
    return out


def _reproducer(explorer: Explorer, find: Find) -> Path:
    """The shrunk schedule as a scenario file with what it shows, next to the run's summary."""
    note = (
        f"Found by explore: the invariant {find.signature} failed ({find.episode.why[:300]}). Shrunk from "
        f"{len(find.episode.schedule.steps)} step(s) to {len(find.shrunk.steps)} trying {find.candidates} candidates; it failed "
        f"the same way in {find.reproduced} of {find.reruns} reruns."
    )
    path = explorer.out / "reproducers" / f"test_{find.shrunk.name()}.py"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render(find.shrunk, note=note))
    return path


def explore(
    explorer: Explorer,
    budget: Budget,
    *,
    shrink_budget_s: float,
    reruns: int = 5,
    max_steps: int = 3,
    until_found: bool = False,
    say: Callable[[str], None] = print,
) -> tuple[list[Episode], list[Find]]:
    """Episodes of ``explorer.seed`` until ``budget`` is spent (or, ``until_found``, the
    first find); each find shrunk (within ``shrink_budget_s``), written as a reproducer and
    re-run ``reruns`` times (one that fails in none is ``flaky``). The budget bounds the start of the last batch, sized so that
    its episodes end about when the budget does (``_batch_size``); a find's shrinking and
    reruns may run past it."""
    started = time.monotonic()
    episodes: list[Episode] = []
    finds: list[Find] = []
    seen: set[Signature] = set()
    while budget.left(started, len(episodes), time.monotonic()):
        n = _batch_size(budget, episodes, time.monotonic() - started)
        batch = [
            generate(explorer.seed, len(episodes) + i, explorer.target, explorer.caps, max_steps=max_steps)
            for i in range(n)
        ]
        ran = explorer.run_batch(batch, folder="episodes")
        episodes += ran
        for ep in ran:
            say(f"episode {ep.schedule.episode}: {ep.state} in {ep.seconds:.0f} s {ep.why[:120]}")
        ep = ran[-1]  # only the last of a batch can have failed
        schedule = ep.schedule
        new = [s for s in sorted(ep.signatures(), key=str) if s not in seen]
        if ep.state != "found" or not new:
            continue
        target = new[0]
        seen.add(target)
        after_s = round(time.monotonic() - started, 1)

        tried_n = itertools.count(1)

        def still_fails(candidate: Schedule, target: Signature = target, tried_n: Iterator[int] = tried_n) -> bool:
            """``CONFIRM`` runs in a row fail the same way (each its own file, log and
            reports; the first that does not ends the try)."""
            return all(
                target in explorer.run(candidate, folder="shrinking", tag=f"_c{next(tried_n)}").signatures()
                for _ in range(CONFIRM)
            )

        small, tried = shrink(schedule, still_fails, budget_s=shrink_budget_s)
        again = sum(target in explorer.run(small, folder="reruns", tag=f"_r{i}").signatures() for i in range(reruns))
        find = Find(ep, target, Path(), small, tried, again, reruns, after_s)
        find.reproducer = _reproducer(explorer, find)
        finds.append(find)
        say(
            f"{'flaky' if find.flaky else 'found'} {target} after {after_s:.0f} s: reproducer {find.reproducer} "
            f"({again} of {reruns} reruns fail the same way)"
        )
        if until_found:
            break
    _write_summary(explorer, episodes, finds)
    return episodes, finds


def _write_summary(explorer: Explorer, episodes: list[Episode], finds: list[Find]) -> None:
    counts: dict[str, int] = {}
    for ep in episodes:
        counts[ep.state] = counts.get(ep.state, 0) + 1
    data: dict[str, Any] = {
        "target": explorer.target,
        "seed": explorer.seed,
        "defects": explorer.env.get("PDSIM_DEFECTS", ""),
        "episodes": [
            {
                "episode": ep.schedule.episode,
                "state": ep.state,
                "seconds": ep.seconds,
                "why": ep.why,
                "file": str(ep.file),
                "schedule": json.loads(ep.schedule.as_json()),
                "known": [{"verdict": v.kind, "component": k.component, "shown_by": k.shown_by} for v, k in ep.known],
            }
            for ep in episodes
        ],
        "finds": [
            {
                "invariant": str(f.signature),
                "kind": f.signature.kind,
                "episode": f.episode.schedule.episode,
                "after_s": f.after_s,
                "reproducer": str(f.reproducer),
                "steps": [len(f.episode.schedule.steps), len(f.shrunk.steps)],
                "shrink_candidates": f.candidates,
                "reproduced": f"{f.reproduced}/{f.reruns}",
                "flaky": f.flaky,
            }
            for f in finds
        ],
        "counts": counts,
        "unhealthy": unhealthy(episodes),
    }
    (explorer.out / "explore.json").write_text(json.dumps(data, indent=2))
    lines = [
        f"# explore: target {explorer.target}, seed {explorer.seed}",
        "",
        f"{len(episodes)} episodes: " + ", ".join(f"{n} {s}" for s, n in sorted(counts.items())),
        "",
    ]
    if why := unhealthy(episodes):
        lines += [f"**Unhealthy run**: {why}.", ""]
    for title, shown in (
        ("Found", [f for f in finds if not f.flaky]),
        ("Flaky (no rerun failed)", [f for f in finds if f.flaky]),
    ):
        if not shown:
            continue
        lines += [f"## {title}", "", "| invariant | episode | steps (drawn → shrunk) | reproduced | reproducer |"]
        lines += ["|---|---|---|---|---|"]
        lines += [
            f"| {f.signature} | {f.episode.schedule.episode} | {len(f.episode.schedule.steps)} → {len(f.shrunk.steps)} "
            f"| {f.reproduced}/{f.reruns} | [{f.reproducer.name}]({os.path.relpath(f.reproducer, explorer.out)}) |"
            for f in shown
        ]
        lines.append("")
    if not finds:
        lines.append("No invariant failed that a known issue does not explain.")
    (explorer.out / "explore.md").write_text("\n".join(lines) + "\n")
