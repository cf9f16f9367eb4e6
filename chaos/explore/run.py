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
reproducer. Running a batch is ``chaos.explore.explorer``, judging an episode
``chaos.explore.episode``, what the run leaves to read ``chaos.explore.summary``.
"""

from __future__ import annotations

import itertools
import time
from pathlib import Path
from typing import Callable, Iterator

from chaos.explore.budget import Budget
from chaos.explore.episode import Episode, Find, Signature
from chaos.explore.explorer import Explorer
from chaos.explore.render import render
from chaos.explore.schedule import Schedule, generate
from chaos.explore.shrink import shrink
from chaos.explore.summary import write_summary

__all__ = ["BATCH", "Budget", "Explorer", "explore"]

BATCH = 4  # episodes per pytest process and stack, at most
# A shrink candidate is kept only when it fails the same way this many runs in a row: one
# that failed once by luck of timing made reproducers that failed 2 of 5 reruns
CONFIRM = 2


def _batch_size(budget: Budget, episodes: list[Episode], spent_s: float) -> int:
    """How many episodes the next process runs: ``BATCH``, fewer where the budget has fewer
    episodes left, or less time than they take at the mean episode time so far (at least
    one: the budget is not yet spent)."""
    if budget.episodes is not None:
        return max(1, min(BATCH, budget.episodes - len(episodes)))
    mean_s = sum(ep.seconds for ep in episodes) / len(episodes) if episodes else 20.0
    left_s = (budget.seconds or 0.0) - spent_s
    return max(1, min(BATCH, int(left_s // max(mean_s, 1.0))))


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
            generate(
                explorer.seed,
                len(episodes) + i,
                explorer.target,
                explorer.caps,
                max_steps=max_steps,
                topology=explorer.topology,
            )
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
    write_summary(explorer, episodes, finds)
    return episodes, finds
