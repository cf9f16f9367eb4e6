"""Explore as a pytest run: seeded random fault schedules on the session's target, judged by
the universal invariants, each find shrunk to a reproducer (docs/explore.md).

Opt-in: it skips unless ``--explore BUDGET`` is given (``pytest suites/test_explore.py
--explore 3m --seed 1``: CI's short run). The session's ``--seed`` draws the schedules, so a
run without one explores new ground and prints the seed that repeats it. Episodes run a few
to a pytest of their own and a fresh stack, which stops at the first that does not pass
(ports from ``BASES["explore"]``); this test starts no stack. A find fails the test with the table of finds and their reproducers; an episode
that could not be judged, with nothing found, is a rig error.
"""

from __future__ import annotations

import pytest

from chaos.errors import RigError
from chaos.explore.health import unhealthy
from chaos.explore.run import Explorer, explore
from chaos.run.run_report import run_dir
from chaos.run.session import EXPLORE, SEED, TARGET, TOPOLOGY
from chaos.run.skips import SkipKind, skip
from chaos.system.ports import BASES, PortAllocator

pytestmark = [pytest.mark.fault("random")]


def test_explore(pytestconfig: pytest.Config) -> None:
    budget = pytestconfig.stash[EXPLORE]
    if budget is None:
        skip(
            SkipKind.OPT_IN, "opt-in: pass --explore BUDGET (e.g. pytest suites/test_explore.py --explore 3m --seed 1)"
        )
    out = run_dir(pytestconfig) / "explore"
    explorer = Explorer.of(
        pytestconfig.stash[TARGET],
        seed=pytestconfig.stash[SEED],
        out=out,
        port_base=PortAllocator(BASES["explore"]).next_base(),
        topology=pytestconfig.stash[TOPOLOGY],
    )
    episodes, finds = explore(explorer, budget, shrink_budget_s=300.0, reruns=5, say=print)
    summary = (out / "explore.md").read_text()
    found = [f for f in finds if not f.flaky]
    if found:
        pytest.fail(f"explore found {len(found)} failure(s) no known issue explains:\n{summary}", pytrace=False)
    if finds:  # Hypothesis's Flaky: a failure seen once is still a failure, told apart
        pytest.fail(f"explore saw {len(finds)} failure(s) that no rerun repeated (flaky):\n{summary}", pytrace=False)
    if any(ep.state == "rig error" for ep in episodes):
        raise RigError(f"explore could not judge every episode:\n{summary}")
    if why := unhealthy(episodes):
        raise RigError(f"explore judged too little: {why}\n{summary}")
