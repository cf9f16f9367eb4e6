"""One pytest process of the rig's, for the tools that run pytest themselves (the kill
matrix, explore): its own port range and report folder, its output in a log, bounded."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Mapping, Sequence

from chaos.limits import waiting
from chaos.tools import REPO_ROOT

__all__ = ["TIMED_OUT", "run_pytest"]

TIMED_OUT = -1  # the return code of a run that exceeded its bound


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
        "chaos.plugin",
        f"--port-base={port_base}",
        f"--reports-dir={reports}",
        *args,
    ]
    with open(log, "w") as fh, waiting(f"pytest on {', '.join(map(str, paths))}", timeout_s):
        try:
            return subprocess.run(
                cmd, cwd=REPO_ROOT, env=dict(env), stdout=fh, stderr=subprocess.STDOUT, timeout=timeout_s
            ).returncode
        except subprocess.TimeoutExpired:
            return TIMED_OUT
