"""One pytest process of the rig's, for the tools that run pytest themselves (the kill
matrix, explore): its own port range and report folder, its output in a log, bounded.

A child pytest owns stacks, and SIGKILL would leave them running: so on its time limit,
and when this process is interrupted (Ctrl-C, SIGTERM), the child gets SIGTERM, which its
plugin takes as Ctrl-C (heal, stop the stacks), and ``TEARDOWN_S`` to finish; only then
SIGKILL, after which its ledger's stacks are reaped here (``chaos.system.cleanup``)."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path
from typing import Mapping, Sequence

from chaos.system.limits import waiting
from chaos.system.tools import REPO_ROOT
from chaos.targets.registry import reap_orphans

__all__ = ["TIMED_OUT", "run_pytest"]

TIMED_OUT = -1  # the return code of a run that exceeded its bound
TEARDOWN_S = 120.0  # a child's own teardown, every wait of it bounded: heal, stop, reap


def run_pytest(
    paths: Sequence[str | Path],
    *,
    port_base: int,
    reports: Path,
    log: Path,
    env: Mapping[str, str],
    args: Sequence[str] = (),
    timeout_s: float,
) -> int:
    """pytest on ``paths`` (the chaos plugin loaded, wherever the files are), from the repo;
    its exit code, or ``TIMED_OUT``."""
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        *map(str, paths),
        "-q",
        "-p",
        "no:cacheprovider",
        "-p",
        "chaos.run.plugin",
        f"--port-base={port_base}",
        f"--reports-dir={reports}",
        *args,
    ]
    with open(log, "w") as fh, waiting(f"pytest on {', '.join(map(str, paths))}", timeout_s + TEARDOWN_S):
        child = subprocess.Popen(cmd, cwd=REPO_ROOT, env=dict(env), stdout=fh, stderr=subprocess.STDOUT)
        try:
            return child.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _stop(child)
            return TIMED_OUT
        except BaseException:
            _stop(child)
            raise


def _stop(child: subprocess.Popen[bytes]) -> None:
    """Ask ``child`` to tear down as on Ctrl-C; kill it, and reap its stacks, if it does not."""
    child.send_signal(signal.SIGTERM)
    try:
        child.wait(timeout=TEARDOWN_S)
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait(timeout=10)
        reap_orphans()
