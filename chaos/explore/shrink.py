"""Shrinking a failing schedule: greedy steps towards a smaller one that still fails the same
way, as Hypothesis shrinks an input. Each pass tries, in order, dropping a step, dropping a
step's fault, letting a held fault heal with its load, and making a load smaller; the first
candidate that still fails is kept and the passes start again, until none does or the
budget is spent."""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Callable, Iterator

from chaos.explore.schedule import Load, Schedule, Step

__all__ = ["candidates", "shrink"]


def _smaller_loads(load: Load) -> Iterator[Load]:
    if load.count > 1:
        yield replace(load, count=1)
        yield replace(load, count=load.count - 1)
    if load.shape == "conversation" and load.rounds > 2:
        yield replace(load, rounds=load.rounds - 1)
    if load.words > 10:
        yield replace(load, words=10)
    if load.max_tokens > 8:
        yield replace(load, max_tokens=8)


def candidates(schedule: Schedule) -> Iterator[Schedule]:
    """Every schedule one step smaller than ``schedule``, the biggest cuts first."""
    steps = list(schedule.steps)
    if len(steps) > 1:
        for i in range(len(steps)):
            yield schedule.with_steps(steps[:i] + steps[i + 1 :])
    for i, step in enumerate(steps):
        if step.strike is not None:
            yield schedule.with_steps([*steps[:i], Step(step.load), *steps[i + 1 :]])
    for i, step in enumerate(steps):
        if step.strike is not None and step.strike.held:
            yield schedule.with_steps(
                [*steps[:i], replace(step, strike=replace(step.strike, held=False)), *steps[i + 1 :]]
            )
    for i, step in enumerate(steps):
        for load in _smaller_loads(step.load):
            yield schedule.with_steps([*steps[:i], replace(step, load=load), *steps[i + 1 :]])


def shrink(
    schedule: Schedule,
    still_fails: Callable[[Schedule], bool],
    *,
    budget_s: float,
    clock: Callable[[], float] = time.monotonic,
) -> tuple[Schedule, int]:
    """The smallest schedule found that ``still_fails``, and how many candidates were run.
    Stops when no candidate fails or ``budget_s`` is spent (the smallest so far stands)."""
    deadline = clock() + budget_s
    tried = 0
    current = schedule
    progress = True
    while progress and clock() < deadline:
        progress = False
        for candidate in candidates(current):
            if clock() >= deadline:
                break
            tried += 1
            if still_fails(candidate):
                current, progress = candidate, True
                break
    return current, tried
