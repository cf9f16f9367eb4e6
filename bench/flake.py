"""Run the clean suites (or the project's tests) N times and report failures per test:
the flake rate.

    .venv/bin/python bench/flake.py 5                 # the suites on the embedded stack
    .venv/bin/python bench/flake.py 5 --tests         # the project's tests as `make test` runs them
    .venv/bin/python bench/flake.py 3 --target sglang-cpu

Each run is its own pytest process with its own stacks; a test that fails or errors in any
run is listed with its count and first verdict or rig error. An xfail or skip is expected.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from chaos.mutants import parse_junit  # noqa: E402  (the repo is on the path first)
from chaos.ports import BASES  # noqa: E402


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
    args = ap.parse_args()
    what = ["tests", "-n", "2", "--dist", "loadgroup"] if args.tests else [args.suites, f"--target={args.target}"]
    failures: Counter[str] = Counter()
    first: dict[str, str] = {}
    walls = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.runs):
            junit = Path(tmp) / f"run{i}.xml"
            t0 = time.monotonic()
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "pytest",
                    *what,
                    "-q",
                    "-p",
                    "no:cacheprovider",
                    f"--junitxml={junit}",
                    f"--port-base={args.port_base}",
                ],
                cwd=REPO,
                stdout=subprocess.DEVNULL,
                timeout=3600,
            )
            walls.append(time.monotonic() - t0)
            run = parse_junit(junit)
            failed = run.verdict_failures + run.rig_errors
            for test in failed:
                failures[test] += 1
                first.setdefault(test, run.verdict or run.rig_error)
            print(
                f"run {i + 1}/{args.runs}: {run.passed} passed, {len(failed)} failed or errored in {walls[-1]:.0f} s",
                flush=True,
            )
    print(f"\n{args.runs} runs, {sum(failures.values())} failures, mean wall {sum(walls) / len(walls):.0f} s")
    for test, n in failures.most_common():
        print(f"  {n}/{args.runs}  {test}  {first[test][:160]}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
