"""Run the clean suites (or the project's tests) N times and report failures per test:
the flake rate.

    .venv/bin/python bench/flake.py 5                 # the suites on the embedded stack
    .venv/bin/python bench/flake.py 5 --tests         # the project's tests as `make test` runs them
    .venv/bin/python bench/flake.py 3 --target sglang-cpu
    .venv/bin/python bench/flake.py 5 --workers 2     # the suites on two xdist workers

Each run is its own pytest process with its own stacks; a test that fails or errors in any
run is listed with its count and first verdict or rig error. An xfail or skip is expected.
The suites' outcomes come from their results (``chaos.run.results``); the project's tests, which
judge no verdicts, from pytest's JUnit XML (its elements, never its text).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from chaos.run.pytest_run import run_pytest  # noqa: E402
from chaos.run.results import load_results  # noqa: E402
from chaos.system.ports import BASES  # noqa: E402  (the repo is on the path first)


def _suite_run(reports: Path) -> tuple[int, dict[str, str]]:
    """(passed, test -> why) of one suites run, from its results."""
    results = load_results(reports)
    bad = {
        r.test: str(next(iter(r.judged_not_passed()), r.message.splitlines()[0] if r.message else r.outcome))
        for r in results
        if r.outcome in ("failed", "error")
    }
    return sum(r.outcome == "passed" for r in results), bad


def _tests_run(junit: Path) -> tuple[int, dict[str, str]]:
    """(passed, test -> why) of one run of the project's tests, from pytest's JUnit XML."""
    try:
        cases = list(ET.parse(junit).getroot().iter("testcase"))
    except (ET.ParseError, FileNotFoundError):
        return 0, {"(run)": "no JUnit XML written"}
    bad, passed = {}, 0
    for case in cases:
        problem = case.find("failure") if case.find("failure") is not None else case.find("error")
        test = f"{case.get('classname', '')}::{case.get('name')}"
        if problem is not None:
            bad[test] = (
                (problem.get("message") or problem.tag).splitlines()[0] if problem.get("message") else problem.tag
            )
        elif case.find("skipped") is None:
            passed += 1
    return passed, bad


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("runs", type=int, nargs="?", default=10)
    ap.add_argument("--port-base", type=int, default=BASES["bench-flake"])
    ap.add_argument("--suites", default="suites")
    ap.add_argument(
        "--tests",
        action="store_true",
        help="run the project's tests as `make test` does (two workers) instead of the suites",
    )
    ap.add_argument("--target", default="embedded", help="the suites' target (default embedded)")
    ap.add_argument("--workers", type=int, default=0, help="the suites on this many xdist workers (default: serial)")
    args = ap.parse_args()
    workers = ["-n", str(args.workers)] if args.workers else []
    what = (
        ["tests", "-n", "2", "--dist", "loadgroup"]
        if args.tests
        else [args.suites, f"--target={args.target}", *workers]
    )
    failures: Counter[str] = Counter()
    first: dict[str, str] = {}
    walls = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.runs):
            junit, reports = Path(tmp) / f"run{i}.xml", Path(tmp) / f"reports{i}"
            t0 = time.monotonic()
            run_pytest(
                what,
                port_base=args.port_base,
                reports=reports,
                log=Path(tmp) / f"run{i}.log",
                env=os.environ,
                args=[f"--junitxml={junit}"],
                timeout_s=3600,
            )
            walls.append(time.monotonic() - t0)
            passed, failed = _tests_run(junit) if args.tests else _suite_run(reports)
            for test, why in failed.items():
                failures[test] += 1
                first.setdefault(test, why)
            print(
                f"run {i + 1}/{args.runs}: {passed} passed, {len(failed)} failed or errored in {walls[-1]:.0f} s",
                flush=True,
            )
    print(f"\n{args.runs} runs, {sum(failures.values())} failures, mean wall {sum(walls) / len(walls):.0f} s")
    for test, n in failures.most_common():
        print(f"  {n}/{args.runs}  {test}  {first[test][:160]}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
