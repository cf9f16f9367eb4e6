"""``pdchaos up/status/down`` from the command line, as a user runs them."""

from __future__ import annotations

import json
import os
import socket
import sys
from dataclasses import dataclass
from pathlib import Path
from subprocess import CompletedProcess

import httpx
import pytest

from chaos.system.ports import PortAllocator
from chaos.system.procs import alive, run
from chaos.targets.stack import PortPlan
from tests.ports import port_base

PDCHAOS = [sys.executable, "-m", "chaos.cli"]


@dataclass(frozen=True)
class Cli:
    """``pdchaos`` against one state folder and port base: call it with the arguments."""

    base: int
    state: Path

    def __call__(self, *args: str, env: dict[str, str] | None = None, timeout: float = 60) -> CompletedProcess[str]:
        return run(
            [*PDCHAOS, "--state-dir", str(self.state), *args], timeout_s=timeout, env={**os.environ, **(env or {})}
        )


@pytest.fixture
def cli(tmp_path, pytestconfig):
    pdchaos = Cli(PortAllocator(port_base(pytestconfig, "stack_cli")).next_base(), tmp_path / "state")
    yield pdchaos
    pdchaos("down")


def test_up_json_status_down_leaves_no_process(cli):
    up = cli(
        "up",
        "--port-base",
        str(cli.base),
        "--json",
        env={"PDSIM_DEFECTS": "", "SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT": "7"},
    )
    assert up.returncode == 0, up.stderr
    info = json.loads(up.stdout)
    assert json.loads((cli.state / "stack.json").read_text()) == info
    assert set(info["proxies"]) == {"client_router", "bootstrap", "control", "kv"}
    for p in info["proxies"].values():
        assert p["listen"].startswith("127.0.0.1:") and p["upstream"].startswith("127.0.0.1:")
    assert set(info["services"]) == {"toxiproxy", "prefill", "decode", "router"}
    for svc in info["services"].values():
        assert alive(svc["pid"]) and Path(svc["log"]).exists()
    assert info["config"]["timeouts"]["bootstrap_s"] == 7.0  # the environment reaches the engines
    assert (
        info["services"]["prefill"]["env"]["SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT"] == "7"
    )  # an integer, as SGLang parses it
    r = httpx.post(
        info["endpoints"]["client"] + "/generate",
        json={"text": "hi", "sampling_params": {"max_new_tokens": 2}},
        timeout=10,
    )
    assert r.status_code == 200

    status = json.loads(cli("status").stdout)
    assert all(s["running"] and not s["frozen"] for s in status["services"].values()), status

    again = cli("up", "--port-base", str(cli.base))
    assert again.returncode == 1 and "already up" in again.stderr

    down = cli("down")
    assert down.returncode == 0, down.stderr
    assert not any(alive(s["pid"]) for s in info["services"].values())
    assert not (cli.state / "stack.json").exists()
    for port in PortPlan(cli.base).all():
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(("127.0.0.1", port))


def test_unknown_defect_is_one_clear_error_and_leaves_nothing_running(cli):
    up = cli("up", "--port-base", str(cli.base), env={"PDSIM_DEFECTS": "no_such_defect"})
    assert up.returncode == 1
    lines = up.stderr.strip().splitlines()
    assert len(lines) == 1 and "unknown pdsim defect(s): no_such_defect" in lines[0]
    assert not (cli.state / "stack.json").exists()
    assert "no_such_defect" not in run(["ps", "-eo", "args"], timeout_s=10).stdout


def test_missing_toxiproxy_is_one_clear_error(cli):
    up = cli("up", "--port-base", str(cli.base), env={"TOXIPROXY_SERVER": "/nonexistent/toxiproxy-server"})
    assert (
        up.returncode == 1 and "TOXIPROXY_SERVER=/nonexistent/toxiproxy-server is not an executable file" in up.stderr
    )


def test_busy_port_is_refused(cli):
    with socket.socket() as s:
        # as every service binds (smg, aiohttp, Go): a TIME_WAIT left by an earlier stack's
        # teardown at this base does not block it, a listener does
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", cli.base + 4))
        s.listen()
        up = cli("up", "--port-base", str(cli.base))
    assert up.returncode == 1 and f"ports [{cli.base + 4}]" in up.stderr


def test_status_without_a_stack(cli):
    r = cli("status")
    assert r.returncode == 1 and "no stack at" in r.stderr
