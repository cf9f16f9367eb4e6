"""The session's options that choose how its stacks start are refused where the target
cannot honour them, before any stack starts (chaos.run.plugin)."""

from __future__ import annotations

import sys

from chaos.system.procs import run
from chaos.system.tools import REPO_ROOT


def test_kv_checksum_is_refused_by_a_target_that_cannot_turn_it_on():
    done = run(
        [sys.executable, "-m", "pytest", "suites/test_kv_link.py", "--collect-only", "-q", "-p", "no:cacheprovider",
         "--target", "embedded", "--kv-checksum"],
        cwd=REPO_ROOT, timeout_s=60,
    )  # fmt: skip
    assert done.returncode == 4, done.stdout[-2000:] + done.stderr[-2000:]  # pytest's usage error
    assert "--kv-checksum needs --target sglang-cpu" in done.stderr, done.stderr[-2000:]
