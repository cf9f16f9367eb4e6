"""sglang_cpu/launch.py: the engines' flags and environment, shared by the local sglang-cpu
target and compose/sglang-cpu.yaml, so that both run the same engine."""

from __future__ import annotations

from typing import Any

import pytest

from sglang_cpu.launch import SHIM, command, environment


def _command(role: str, **given: Any) -> list[str]:
    """``command`` for ``role`` with made-up ports and paths; ``given`` overrides them."""
    ports = {"prefill": (1, 2, 3), "decode": (4, 5, None)}[role]
    args: dict[str, Any] = {
        "model_path": "/m",
        "served_model_name": "n",
        "port": ports[0],
        "nccl_port": ports[1],
        "max_running_requests": 32 if role == "prefill" else 2,
        "bootstrap_port": ports[2],
    }
    return command(role, **(args | given))


def test_each_role_gets_the_cpu_flags_and_its_own():
    prefill, decode = _command("prefill"), _command("decode")
    for argv in (prefill, decode):
        assert argv[:2] == ["-m", "sglang.launch_server"]
        assert "--sleep-on-idle" in argv and "--load-snapshot-publish-interval" in argv and "--log-requests" in argv
        assert argv[argv.index("--host") + 1] == "127.0.0.1"
    assert prefill[prefill.index("--disaggregation-bootstrap-port") + 1] == "3"
    assert decode[decode.index("--disaggregation-decode-retraction-backup") + 1] == "cpu_tensor"
    assert (
        prefill[prefill.index("--max-running-requests") + 1] == "32"
        and decode[decode.index("--max-running-requests") + 1] == "2"
    )
    cached = _command("decode", decode_radix_cache=True)
    assert (
        "--disaggregation-decode-enable-radix-cache" in cached
        and "--disaggregation-decode-enable-radix-cache" not in decode
    )
    with pytest.raises(SystemExit, match="bootstrap-port"):
        _command("prefill", bootstrap_port=None)


def test_environment_puts_the_shim_first_and_keeps_the_callers_timeouts():
    env = environment("prefill", {"PYTHONPATH": "/venv/site", "SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT": "3"})
    assert env["PYTHONPATH"].split(":") == [str(SHIM), "/venv/site"]
    assert env["SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT"] == "3" and env["SGLANG_HOST_IP"] == "127.0.0.1"
    assert env["SGLANG_DISAGGREGATION_ALL_CP_RANKS_TRANSFER"] == "1"
    assert "SGLANG_DISAGGREGATION_ALL_CP_RANKS_TRANSFER" not in environment("decode", {})
    assert environment("decode", {"PYTHONPATH": ""})["PYTHONPATH"] == str(SHIM)


def test_a_context_length_is_passed_only_where_the_stack_sets_one():
    """One kind's ``--context-length`` (``StackConfig.context_length``) reaches that kind's
    engines, locally and through Compose, and nothing else."""
    from chaos.errors import ConfigError
    from chaos.targets.compose import compose_env
    from chaos.targets.stack import StackConfig

    assert _command("decode", context_length=256)[-2:] == ["--context-length", "256"]
    assert "--context-length" not in _command("prefill")
    cfg = StackConfig(context_length={"decode": 256})
    assert cfg.context_flag("decode") == ("--context-length", "256") and cfg.context_flag("prefill") == ()
    env = compose_env(cfg)
    assert env["ENGINE_DECODE_CONTEXT_LENGTH"] == "--context-length=256" and env["ENGINE_PREFILL_CONTEXT_LENGTH"] == ""
    with pytest.raises(ConfigError, match="engine kind"):
        StackConfig(context_length={"router": 256})
