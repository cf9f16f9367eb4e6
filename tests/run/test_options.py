"""The session's options that choose how its stacks start: honoured by the targets that can,
refused by the others before any stack starts (chaos.run.plugin)."""

from __future__ import annotations

import json
import sys

from chaos.system.procs import run
from chaos.system.tools import REPO_ROOT
from tests.ports import port_base


def test_kv_checksum_starts_the_sessions_stacks_with_the_engines_checking_their_kv(tmp_path, pytestconfig):
    """With ``--kv-checksum`` the corruption scenario on the session's own stack (pdsim,
    its checksum off by default like SGLang's, where it is a known issue) is judged on the
    verdicts of an engine that checks its KV, and passes them: every request into the fault
    failed cleanly, and decode counted the failed transfers."""
    reports = tmp_path / "reports"
    done = run(
        [sys.executable, "-m", "pytest", "suites/test_kv_corruption.py", "-k", "as_configured", "-q",
         "-p", "no:cacheprovider", "--kv-checksum", f"--port-base={port_base(pytestconfig, 'kv_checksum')}",
         f"--reports-dir={reports}"],
        cwd=REPO_ROOT, timeout_s=120,
    )  # fmt: skip
    assert done.returncode == 0 and "1 passed" in done.stdout, done.stdout[-3000:]
    (test,) = json.loads(next(reports.glob("*/summary.json")).read_text())["tests"]
    held = {v["kind"]: v["status"] for v in test["verdicts"]}
    assert held["never_served_wrong"] == held["failed_requests_are_clean"] == held["watchdog_fired"] == "pass", held


def test_kv_checksum_is_refused_by_a_target_that_cannot_turn_it_on():
    done = run(
        [sys.executable, "-m", "pytest", "suites/test_kv_corruption.py", "--collect-only", "-q", "-p", "no:cacheprovider",
         "--target", "compose-gpu", "--kv-checksum"],
        cwd=REPO_ROOT, timeout_s=60,
    )  # fmt: skip
    assert done.returncode == 4, done.stdout[-2000:] + done.stderr[-2000:]  # pytest's usage error
    assert "target compose-gpu cannot turn it on" in done.stderr, done.stderr[-2000:]
