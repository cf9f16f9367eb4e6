"""Mutation testing of the judging code: how many of mutmut's mutants of ``chaos/judge`` do
its unit tests (``tests/judge/``, ``tests/test_at_stake.py``, ``tests/test_explore.py``) kill? A surviving
mutant is a change to a verdict that no test notices: a blind spot of the tests, or code
that does not matter.

    .venv/bin/pip install -e '.[dev,mutation]'
    .venv/bin/python bench/mutation.py              # run, then the score and the survivors
    .venv/bin/python bench/mutation.py --report     # the last run's, without running again

mutmut's settings are in pyproject.toml (``[tool.mutmut]``); it works in ``mutants/``. Not a
CI step: a run takes tens of minutes on a 2-core machine. The score and the survivors are
recorded in docs/development.md.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
MUTMUT = REPO / ".venv" / "bin" / "mutmut"
RUN_S = 4 * 3600  # a bound on the run: mutmut's own per-mutant timeouts bound each mutant


def _results() -> dict[str, str]:
    """Each mutant's name and status as ``mutmut results --all true`` lists them."""
    out = subprocess.run(
        [str(MUTMUT), "results", "--all", "true"], cwd=REPO, capture_output=True, text=True, timeout=300, check=True
    )
    found = {}
    for line in out.stdout.splitlines():
        name, sep, status = line.strip().rpartition(": ")
        if sep and name:
            found[name] = status
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--report", action="store_true", help="report the last run without running again")
    parser.add_argument("--children", type=int, default=2, help="mutants tested at once (default 2: two cores)")
    args = parser.parse_args()
    if not MUTMUT.exists():
        print("bench/mutation.py: install mutmut first: .venv/bin/pip install -e '.[dev,mutation]'", file=sys.stderr)
        return 2
    if not args.report:
        t0 = time.monotonic()
        subprocess.run([str(MUTMUT), "run", "--max-children", str(args.children)], cwd=REPO, timeout=RUN_S, check=False)
        print(f"mutmut run took {time.monotonic() - t0:.0f} s")
    results = _results()
    counts = Counter(results.values())
    by_module: dict[str, Counter[str]] = defaultdict(Counter)
    for name, status in results.items():
        by_module[name.split("ǁ")[0].split(".x_")[0]][status] += 1
    judged = counts["killed"] + counts["survived"] + counts["timeout"]
    score = (counts["killed"] + counts["timeout"]) / judged if judged else 0.0
    print(f"{len(results)} mutants: " + ", ".join(f"{n} {s}" for s, n in counts.most_common()))
    print(f"score {score:.1%} (killed or timed out, of those a test could judge)")
    for module, c in sorted(by_module.items()):
        print(f"  {module}: " + ", ".join(f"{n} {s}" for s, n in c.most_common()))
    survivors = sorted(name for name, status in results.items() if status == "survived")
    print("survivors:\n" + "\n".join(f"  {name}" for name in survivors))
    (REPO / "mutants" / "summary.json").write_text(
        json.dumps({"counts": dict(counts), "score": score, "survivors": survivors}, indent=2)
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
