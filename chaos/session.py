"""What a pytest session decides once, at configure, and every part of the plugin reads:
the target under test and the seed of every random choice (pytest stash keys)."""

from __future__ import annotations

import pytest

from chaos.targets.registry import TargetChoice

__all__ = ["SEED", "TARGET"]

SEED = pytest.StashKey[int]()
TARGET = pytest.StashKey[TargetChoice]()
