"""Wall time of a pytest run and its slowest tests: the clean suites on a target (default),
one selection of them from a fresh shell, the project's own tests as `make test` runs them,
and (with --matrix) the kill matrix.

Run on an otherwise idle machine:

    .venv/bin/python bench/suite_times.py                          # the suites, embedded
    .venv/bin/python bench/suite_times.py -k decode_restart        # one family, fresh process
    .venv/bin/python bench/suite_times.py --tests                  # `make test`'s pytest run
    .venv/bin/python bench/suite_times.py --target sglang-cpu --matrix
    .venv/bin/python bench/suite_times.py --target compose-gpu     # a GPU host (docs/gpu.md)
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

from chaos.run.pytest_run import run_pytest
from chaos.system.ports import BASES
from chaos.targets.gpu import GPU
from chaos.targets.registry import TARGETS

REPO = Path(__file__).resolve().parent.parent
# How long one timed run may take before the bench gives up on it: a GPU engine restarts in
# minutes, not seconds, and the suites restart engines often (the nightly job's 240 minutes,
# .github/workflows/nightly-gpu.yml); an hour is ample elsewhere.
BUDGET_S = {**{t: 3600.0 for t in TARGETS}, **{t: 4 * 3600.0 for t in GPU}}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-k", dest="select", default="", help="a pytest -k expression")
    ap.add_argument(
        "--tests", action="store_true", help="time the project's tests as `make test` runs them (two workers)"
    )
    ap.add_argument("--matrix", action="store_true", help="also time `pdchaos mutants`")
    ap.add_argument("--port-base", type=int, default=BASES["bench-suites"])
    ap.add_argument(
        "--target",
        default="embedded",
        choices=[t for t in TARGETS if t != "attach"],
        help="the suites' target (default embedded)",
    )
    args = ap.parse_args()
    what = ["tests", "-n", "2", "--dist", "loadgroup"] if args.tests else ["suites", f"--target={args.target}"]
    if args.select:
        what += ["-k", args.select]
    with tempfile.TemporaryDirectory() as tmp:
        junit = Path(tmp) / "run.xml"
        t0 = time.monotonic()
        rc = run_pytest(
            what,
            port_base=args.port_base,
            reports=Path(tmp) / "reports",
            log=Path(tmp) / "run.log",
            env=os.environ,
            args=[f"--junitxml={junit}"],
            timeout_s=BUDGET_S[args.target],
        )
        wall = time.monotonic() - t0
        cases = sorted(
            (
                (float(c.get("time", 0)), f"{c.get('classname')}::{c.get('name')}")
                for c in ET.parse(junit).getroot().iter("testcase")
            ),
            reverse=True,
        )
    print(
        f"pytest {' '.join(what)}: {wall:.0f} s wall (process start to exit), {sum(s for s, _ in cases):.0f} s of test time, {len(cases)} tests, exit {rc}"
    )
    for seconds, name in cases[:5]:
        print(f"  {seconds:6.1f} s  {name}")
    if args.matrix:
        t0 = time.monotonic()
        rc = subprocess.run(
            [str(Path(sys.executable).parent / "pdchaos"), "mutants"], cwd=REPO, timeout=BUDGET_S["embedded"]
        ).returncode
        print(f"kill matrix: {time.monotonic() - t0:.0f} s wall, exit {rc}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
