"""Explore end to end on the embedded stack: a planted pdsim defect is found, shrunk to a
one-step reproducer, and the reproducer, run by pytest, fails by the same invariant."""

from __future__ import annotations

import os

from chaos.explore.run import Budget, Explorer, explore
from chaos.explore.schedule import Load, Schedule, Step, generate
from chaos.targets.base import Capability
from tests.ports import port_base

# Seed 322's episode 0 on embedded: a 4-round conversation of 3 agents at 120 words a round,
# no fault (load alone). pdsim's context_truncation drops the oldest turns beyond 200 tokens,
# so the third round's prompt is no longer than the second's: context_grows fails.
SEED = 322


def _truncating(out, pytestconfig) -> Explorer:
    """An explorer of the embedded stack with pdsim's ``context_truncation`` planted."""
    return Explorer(
        target="embedded",
        seed=SEED,
        out=out,
        caps=frozenset(Capability),
        port_base=port_base(pytestconfig, "explore"),
        env={**os.environ, "PDSIM_DEFECTS": "context_truncation"},
        timeout_s=120,
    )


def test_explore_finds_a_planted_defect_and_shrinks_it(tmp_path, pytestconfig):
    explorer = _truncating(tmp_path, pytestconfig)
    lines: list[str] = []
    episodes, finds = explore(explorer, Budget(episodes=1), shrink_budget_s=180, reruns=1, say=lines.append)
    assert [ep.state for ep in episodes] == ["found"], lines
    (find,) = finds
    assert find.signature.kind == "context_grows"
    # one agent is enough, and three long rounds (fewer do not truncate)
    assert find.shrunk.steps == (Step(Load("conversation", 1, rounds=3, words=120, max_tokens=8)),)
    assert find.reproduced == 1, lines
    assert find.reproducer.exists() and "context_grows" in find.reproducer.read_text()
    assert f"(reproducers/{find.reproducer.name})" in (tmp_path / "explore.md").read_text()


def test_a_batch_shares_one_stack_until_an_episode_does_not_pass(tmp_path, pytestconfig):
    """Episodes run a few to a process and stack, in order; the process stops at the first
    that does not pass, so no episode follows a failed one on its stack."""
    explorer = _truncating(tmp_path, pytestconfig)
    quiet = Schedule(SEED, 90, "embedded", (Step(Load("streams", 2, words=10, max_tokens=8)),))
    truncated = generate(SEED, 0, "embedded", explorer.caps)  # fails context_grows (above)
    after = Schedule(SEED, 91, "embedded", (Step(Load("requests", 1, words=10, max_tokens=8)),))
    ran = explorer.run_batch([quiet, truncated, after], folder="batch")
    assert [(ep.schedule.episode, ep.state) for ep in ran] == [(90, "passed"), (0, "found")], [ep.why for ep in ran]
    assert len(list((tmp_path / "batch").glob("*.log"))) == 1  # one process for the batch
