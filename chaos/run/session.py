"""What a pytest session decides once, at configure, and every part of the plugin reads:
the target under test, the seed of every random choice, the soak's duration, explore's
budget, the longer idle a nightly run holds and the stacks' topology (pytest stash keys), and which xdist worker
it is, if any."""

from __future__ import annotations

import pytest

from chaos.explore.budget import Budget
from chaos.run.soak import Soak
from chaos.system.topology import Topology
from chaos.targets.registry import TargetChoice

__all__ = ["EXPLORE", "IDLE", "SEED", "SOAK", "TARGET", "TOPOLOGY", "xdist_worker"]

SEED = pytest.StashKey[int]()
SOAK = pytest.StashKey[Soak | None]()
EXPLORE = pytest.StashKey[Budget | None]()
IDLE = pytest.StashKey[float | None]()  # seconds: --idle
TARGET = pytest.StashKey[TargetChoice]()
TOPOLOGY = pytest.StashKey[Topology | None]()  # --topology: None keeps each stack's own (1p1d)


def xdist_worker(config: pytest.Config) -> str | None:
    """This process's xdist worker id ("gw0", ...), or None when it is none: a pytest run
    started inside a test inherits its parent's ``PYTEST_XDIST_WORKER`` but is no worker."""
    return getattr(config, "workerinput", {}).get("workerid")
