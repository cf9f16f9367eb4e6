"""``pytest -n 2`` gives every worker its own stack (own ports, own proxies) and the same
results as a serial run, and one run summary that holds every worker's tests."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from chaos.run.results import load_results
from chaos.system.ports import RUN_STRIDE
from chaos.system.procs import run
from chaos.system.tools import REPO_ROOT
from tests.ports import port_base

SELECTION = [
    "suites/test_proxy_wedge.py",
    "suites/test_kv_link.py::test_kv_link_down_fails_both_legs_at_once",
    "suites/test_prefill_crash.py::test_decode_picks_up_a_restarted_prefill",
]


def _status(verdict: dict[str, str]) -> str:
    held = verdict["by"] == "settle" and verdict["status"] in ("pass", "not_at_stake")
    return f"{verdict['kind']}={'held' if held else verdict['status']}"


def _run(tmp_path: Path, name: str, port_base: int, *extra: str) -> tuple[dict[str, tuple[str, ...]], set[str]]:
    """Per test: its outcome and its verdicts' statuses; and the stacks the tests ran on.
    The kit's own verdicts (``settle``'s) count by whether they held: one may be at stake in
    one order and not in another (after ``proxy_wedge``'s client link went down, nothing
    reached an engine, so ``no_leak`` holds nothing, unless the test before, on that worker's
    stack, left a gauge up that came back in the window: a pass)."""
    reports = tmp_path / name
    r = run(
        [sys.executable, "-m", "pytest", *SELECTION, "-q", "-p", "no:cacheprovider", f"--port-base={port_base}", f"--reports-dir={reports}", "--seed=7", *extra],
        cwd=REPO_ROOT, timeout_s=300, env={**os.environ, "PDCHAOS_RUN_ID": name},
    )  # fmt: skip
    assert r.returncode == 0, r.stdout[-2000:]
    summary = json.loads((reports / name / "summary.json").read_text())
    outcomes = {t["test"]: (t["outcome"], *(_status(v) for v in t["verdicts"])) for t in summary["tests"]}
    results = load_results(reports / name)
    assert {t.outcome for t in results} == {"passed"} and len(results) == len(outcomes) >= len(SELECTION), outcomes
    return outcomes, {t["stack"] for t in summary["tests"]}


def test_two_workers_agree_with_a_serial_run(tmp_path, pytestconfig):
    base = port_base(pytestconfig, "parallel")
    serial, serial_stacks = _run(tmp_path, "serial", base)
    parallel, parallel_stacks = _run(tmp_path, "parallel", base + RUN_STRIDE, "-n", "2")
    assert parallel == serial and len(serial) == 6
    assert len(serial_stacks) == 1 and len(parallel_stacks) == 2  # one stack per worker, own ports
