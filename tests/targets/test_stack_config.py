"""The stack's configuration as the engines read it: SGLang parses its bootstrap and waiting
timeouts with int() (``environ.py``, ``EnvInt``) and silently keeps 300 s for "3.0"."""

from __future__ import annotations

from dataclasses import astuple

import pytest

from chaos.errors import ConfigError
from chaos.targets.stack import PortPlan, Timeouts


def test_integer_timeouts_are_written_as_integers():
    env = Timeouts().to_env()
    for var in (
        "SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT",
        "SGLANG_DISAGGREGATION_WAITING_TIMEOUT",
        "SGLANG_DISAGGREGATION_PREFILL_INFLIGHT_TIMEOUT",
        "SGLANG_DISAGGREGATION_HEARTBEAT_MAX_FAILURE",
    ):
        assert int(env[var]) == int(float(env[var])) and "." not in env[var], (var, env[var])
    assert float(env["SGLANG_DISAGGREGATION_HEARTBEAT_INTERVAL"]) == 2.0  # EnvFloat in SGLang


def test_a_float_for_an_integer_timeout_is_refused_with_sglangs_reason():
    with pytest.raises(
        ConfigError,
        match=r"SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT='3\.0' is not a whole number \(SGLang parses it with int\(\)\)",
    ):
        Timeouts.from_env({"SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT": "3.0"})
    assert Timeouts.from_env({"SGLANG_DISAGGREGATION_WAITING_TIMEOUT": "9"}).waiting_s == 9


def test_port_plan_ports_are_distinct_and_listed():
    """The named ports (the first engine of each kind's) and the second engines' together
    are the plan's ports, each once."""
    plan = PortPlan(20000)
    named = [getattr(plan, n) for n, p in vars(PortPlan).items() if isinstance(p, property)]
    second = [*astuple(plan.prefill_at(1)), *astuple(plan.decode_at(1))]
    assert sorted(named + second) == plan.all()
    assert astuple(plan.prefill_at(0))[0] == plan.prefill and plan.decode_at(0).kv_proxy == plan.kv
    with pytest.raises(ConfigError, match="two prefills, not 3"):
        plan.prefill_at(2)
