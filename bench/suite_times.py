"""Wall time of the clean suite on a target, its five slowest tests, and (with --matrix) the
kill matrix.

Run: ``.venv/bin/python bench/suite_times.py [--target sglang-cpu] [--matrix]`` on an
otherwise idle machine.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

from chaos.ports import BASES

REPO = Path(__file__).resolve().parent.parent


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--matrix", action="store_true", help="also time `pdchaos mutants`")
    ap.add_argument("--port-base", type=int, default=BASES["bench-suites"])
    ap.add_argument("--target", default="embedded", help="embedded (default) or sglang-cpu")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        junit = Path(tmp) / "suite.xml"
        t0 = time.monotonic()
        rc = subprocess.run([sys.executable, "-m", "pytest", "suites", "-q", "-p", "no:cacheprovider", f"--junitxml={junit}", f"--port-base={args.port_base}", f"--target={args.target}"], cwd=REPO, stdout=subprocess.DEVNULL, timeout=3600).returncode
        wall = time.monotonic() - t0
        cases = sorted(((float(c.get("time", 0)), f"{c.get('classname')}::{c.get('name')}") for c in ET.parse(junit).getroot().iter("testcase")), reverse=True)
    print(f"clean suite on {args.target}: {wall:.0f} s wall, {len(cases)} tests, pytest exit {rc}")
    for seconds, name in cases[:5]:
        print(f"  {seconds:6.1f} s  {name}")
    if args.matrix:
        t0 = time.monotonic()
        rc = subprocess.run([str(Path(sys.executable).parent / "pdchaos"), "mutants"], cwd=REPO, timeout=3600).returncode
        print(f"kill matrix: {time.monotonic() - t0:.0f} s wall, exit {rc}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
