"""Where the tests' own stacks take their ports: offsets from pytest's ``--port-base``, in one
table, so that no two collide (a pytest run with two xdist workers spans 1280 ports from its
base: ``chaos.ports.RUN_STRIDE``). All stay below 32768, outside the ephemeral range."""

from __future__ import annotations

import pytest

from chaos.ports import RUN_STRIDE

OFFSETS = {
    "stack_cli": 3000,
    "interrupt": 4000,
    "parallel": 5000,  # a pytest run with -n 2: RUN_STRIDE ports
    "sglang": 5000 + RUN_STRIDE,
    "sglang_embedded": 5000 + RUN_STRIDE + 100,
    "compose_sglang": 7000,
    "scenario": 7600,
    "mutants": 8000,
}


def port_base(config: pytest.Config, user: str) -> int:
    """The first port of ``user``'s range in this test session."""
    return config.getoption("--port-base") + OFFSETS[user]
