"""``chaos.judge.clock``: each check passes on a good history and fails (or is unknown) on a
crafted bad one, histories written by hand."""

from __future__ import annotations

import pytest

from chaos import verdicts as v
from chaos.observe.history import (
    Invoke,
)


def test_a_misspelt_phase_or_since_fails_at_once():
    with pytest.raises(ValueError):
        v.no_leak(gauges=[], within_s=1, since="heals")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        Invoke(0.0, 0.0, "a", "/p", False, phase="faults")  # type: ignore[arg-type]
