"""Ctrl-C (twice), SIGTERM and a crash in the middle of a scenario leave nothing running."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from chaos.system.ports import PortAllocator
from chaos.system.procs import alive, run
from chaos.system.tools import REPO_ROOT
from chaos.system.wait import wait_until
from tests.dockerhost import engine_or_skip, project_containers
from tests.ports import port_base

SCENARIO = "suites/test_kv_link.py::test_slow_kv_link_is_not_stuck"


def _start(tmp_path: Path, base: int, *extra: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PDCHAOS_SESSIONS_DIR": str(tmp_path / "sessions"), "PDCHAOS_RUN_ID": "interrupt"}
    args = [
        sys.executable,
        "-X",
        "faulthandler",
        "-m",
        "pytest",
        SCENARIO,
        "-q",
        "-p",
        "no:cacheprovider",
        f"--port-base={base}",
        f"--reports-dir={tmp_path / 'reports'}",
        f"--basetemp={tmp_path / 'tmp'}",
        "--junitxml=" + str(tmp_path / "j.xml"),
        *extra,
    ]
    with open(tmp_path / "child.log", "wb") as log:  # the child holds its own copy of the descriptor
        return subprocess.Popen(
            args, cwd=REPO_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )


def _wait_or_explain(proc: subprocess.Popen[bytes], tmp_path: Path, timeout_s: float) -> None:
    """Wait for the child; if it hangs, make it dump every thread's stack (faulthandler on
    SIGABRT) and fail with that dump, so a hang is diagnosable from the CI log alone."""
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGABRT)
        proc.wait(timeout=10)
        tail = (tmp_path / "child.log").read_text(errors="replace")[-6000:]
        pytest.fail(f"the interrupted pytest did not exit within {timeout_s:g}s; its output and thread dump:\n{tail}")


def _fault_active(tmp_path: Path) -> bool:
    return any('"stage":"verified"' in p.read_text() for p in (tmp_path / "reports").rglob("history.jsonl"))


def _stack_pids(tmp_path: Path) -> list[int]:
    pids = []
    for ledger in (tmp_path / "sessions").glob("*.txt"):
        for line in ledger.read_text().splitlines():
            info = json.loads((Path(line) / "stack.json").read_text())
            pids += [int(s["pid"]) for s in info["services"].values()]
    return pids


def _stack_written(tmp_path: Path) -> bool:
    try:
        return bool(_stack_pids(tmp_path))
    except (OSError, ValueError):  # the ledger names the stack before its stack.json is written
        return False


@pytest.fixture
def base(pytestconfig) -> int:
    return PortAllocator(port_base(pytestconfig, "interrupt")).next_base()


@pytest.mark.parametrize(
    "signals",
    [(signal.SIGINT,), (signal.SIGINT, signal.SIGINT), (signal.SIGTERM,)],
    ids=["ctrl-c", "ctrl-c-twice", "sigterm"],
)
def test_interrupt_mid_fault_stops_everything(tmp_path, base, signals):
    proc = _start(tmp_path, base)
    try:
        wait_until(lambda: _fault_active(tmp_path), timeout_s=60, what="the scenario's fault is in place")
        pids = _stack_pids(tmp_path)
        assert pids and all(alive(p) for p in pids)
        for sig in signals:
            proc.send_signal(sig)
            time.sleep(0.3)  # a human's second Ctrl-C comes a moment later
        _wait_or_explain(proc, tmp_path, 60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert not [p for p in pids if alive(p)]
    assert not list((tmp_path / "sessions").glob("*.txt"))  # the session cleaned its ledger


def test_a_crashed_runs_leftovers_are_reaped_by_the_next(tmp_path, base):
    proc = _start(tmp_path, base)
    try:
        wait_until(lambda: _fault_active(tmp_path), timeout_s=60, what="the scenario's fault is in place")
        pids = _stack_pids(tmp_path)
        os.kill(proc.pid, signal.SIGKILL)  # pytest dies; its stack does not
        proc.wait(timeout=10)
        assert all(alive(p) for p in pids)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    env = {**os.environ, "PDCHAOS_SESSIONS_DIR": str(tmp_path / "sessions")}
    reaped = run(
        [sys.executable, "-c", "from chaos.targets.registry import reap_orphans; print(len(reap_orphans()))"],
        cwd=REPO_ROOT,
        env=env,
        timeout_s=60,
    )
    assert reaped.stdout.strip() == "1", reaped.stderr  # the one stack of the dead session
    assert not [p for p in pids if alive(p)]


def _processes_on(base: int) -> list[str]:
    """Every process whose command line names one of the stack's ports: what a listing of
    the machine shows of a stack on ``base``, whether or not its stack.json was written."""
    ports = {str(p) for p in range(base, base + 12)}
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            argv = cmdline.read_bytes().decode(errors="replace").split("\0")
        except OSError:
            continue
        if (
            any(a.rpartition(":")[2] in ports or a.rpartition("=")[2] in ports for a in argv if a)
            and "pytest" not in argv[0:3]
        ):
            found.append(" ".join(argv))
    listening = run(["ss", "-Hltn"], timeout_s=10).stdout.split()
    found += [
        f"a listener on {addr}" for addr in listening if addr.rpartition(":")[2] in ports
    ]  # smg renames its process
    return found


@pytest.mark.parametrize("draw", range(3))
def test_sigint_at_a_random_moment_leaves_nothing(tmp_path, base, seed, draw):
    """SIGINT anywhere in a scenario's life (stack start, workload, fault, teardown): after
    the run exits, no process of its stack is left on the machine."""
    import random

    delay = random.Random(seed * 10 + draw).uniform(0.5, 14.0)
    proc = _start(tmp_path, base)
    try:
        time.sleep(delay)  # the random moment itself is the test's input, not a synchronisation
        proc.send_signal(signal.SIGINT)
        _wait_or_explain(proc, tmp_path, 60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    left = _processes_on(base)
    assert not left, f"SIGINT {delay:.1f}s after start left: {left}"
    assert not list((tmp_path / "sessions").glob("*.txt"))


def test_sigint_mid_fault_on_the_compose_target_leaves_no_container(tmp_path, base):
    engine = engine_or_skip()
    proc = _start(tmp_path, base, "--target", "compose")
    project = f"pdchaos-{base}"
    try:
        wait_until(lambda: _fault_active(tmp_path), timeout_s=90, what="the scenario's fault is in place")
        assert len(project_containers(engine, project)) == 4
        proc.send_signal(signal.SIGINT)
        _wait_or_explain(proc, tmp_path, 60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert project_containers(engine, project) == []
    assert not _processes_on(base)
    engine.close()


def test_sigterm_to_explore_stops_its_episodes_stack(tmp_path, base):
    """explore runs each episode in a child pytest that owns the stack: SIGTERM to explore
    reaches the child as an interrupt (chaos.run.pytest_run), so the stack is stopped too."""
    env = {**os.environ, "PDCHAOS_SESSIONS_DIR": str(tmp_path / "sessions")}
    args = [sys.executable, "-m", "chaos.cli", "explore", "--seed", "1", "--budget", "1", f"--port-base={base}"]
    with open(tmp_path / "child.log", "wb") as log:  # the child holds its own copy of the descriptor
        proc = subprocess.Popen(
            [*args, "--out", str(tmp_path / "explore")], cwd=REPO_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT
        )
    try:
        wait_until(lambda: _stack_written(tmp_path), timeout_s=60, what="the episode's stack is up")
        pids = _stack_pids(tmp_path)
        proc.send_signal(signal.SIGTERM)
        _wait_or_explain(proc, tmp_path, 150)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, (tmp_path / "child.log").read_text()
    assert not [p for p in pids if alive(p)]
    assert not list((tmp_path / "sessions").glob("*.txt"))
