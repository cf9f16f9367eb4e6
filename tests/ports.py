"""Where the tests' own stacks take their ports: offsets from pytest's ``--port-base``, in one
table, so that no two collide (a pytest run with two xdist workers spans 1280 ports from its
base: ``chaos.system.ports.RUN_STRIDE``). All stay below 32768, outside the ephemeral range."""

from __future__ import annotations

import pytest

from chaos.system.ports import RUN_STRIDE

OFFSETS = {
    "explore": 2000,  # one pytest process at a time, one stack each
    "stack_cli": 3000,
    "interrupt": 4000,
    "parallel": 5000,  # a serial run, then one with -n 2: two RUN_STRIDEs
    "sglang": 5000 + 2 * RUN_STRIDE,  # one stack: 16 ports
    "kv_checksum": 5050 + 2 * RUN_STRIDE,  # a suite run with --kv-checksum (tests/run/test_options.py)
    "sglang_embedded": 5100 + 2 * RUN_STRIDE,
    "compose_sglang": 5200 + 2 * RUN_STRIDE,
    "gpu_on_cpu": 5300 + 2 * RUN_STRIDE,
    "compose_start_failure": 5400 + 2 * RUN_STRIDE,
    "netns": 5800 + 2 * RUN_STRIDE,  # one port: an echo server behind the bridge
    "scenario": 5900 + 2 * RUN_STRIDE,
    "mutants": 6600 + 2 * RUN_STRIDE,  # up to 6600 + 3 * RUN_STRIDE: below 32768 from the default base
}


def port_base(config: pytest.Config, user: str) -> int:
    """The first port of ``user``'s range in this test session."""
    return config.getoption("--port-base") + OFFSETS[user]
