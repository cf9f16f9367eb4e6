"""Mutation testing of the judging code: how many of mutmut's mutants of ``chaos/judge`` do
its unit tests (``tests/judge/``, ``tests/explore/test_explore.py``) kill? A surviving
mutant is a change to a verdict that no test notices: a blind spot of the tests, or code
that does not matter.

    .venv/bin/pip install -e '.[dev,mutation]'
    .venv/bin/python bench/mutation.py              # run, then the score and the survivors
    .venv/bin/python bench/mutation.py --report     # the last run's, without running again

mutmut's settings are in pyproject.toml (``[tool.mutmut]``); it works in ``mutants/``. Not a
CI step: a run takes tens of minutes on a 2-core machine. The score and the survivors are
recorded in docs/development.md.

mutmut 3 leaves every decorated function alone (its trampoline copies a function with its
decorators, and most decorators have effects when they run: boxed/mutmut#387), which would
leave out the verdicts' own bodies: each is declared by ``@verdict(...)`` or
``@premise(...)``. This script runs mutmut with two changes that let it in: a function under
exactly one of those two is mutated, and its copies (the original and each mutant, which
the trampoline calls) are written without the decorator, so that only the trampoline is
declared, under the verdict's own name and signature.
"""

from __future__ import annotations

import argparse
import ast
import difflib
import io
import json
import re
import shutil
import subprocess
import sys
import time
import tokenize
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
MUTMUT = REPO / ".venv" / "bin" / "mutmut"
RUN_S = 4 * 3600  # a bound on the run: mutmut's own per-mutant timeouts bound each mutant
JUDGE_DECORATORS = frozenset({"verdict", "premise"})  # chaos/judge/declare.py


def _declared(function: Any) -> bool:
    """Whether a libcst function definition is a judge's body: one decorator, a call of
    ``verdict`` or ``premise``."""
    import libcst as cst

    if len(function.decorators) != 1:
        return False
    decorator = function.decorators[0].decorator
    return (
        isinstance(decorator, cst.Call)
        and isinstance(decorator.func, cst.Name)
        and decorator.func.value in JUDGE_DECORATORS
    )


def reach_judges() -> None:
    """Patch mutmut (pinned in pyproject.toml) so that it mutates the judges' bodies, with
    undecorated copies behind a decorated trampoline. The judges carry no mutmut pragma, so
    skipping none of them loses nothing mutmut's other skip rules would have kept."""
    import libcst as cst
    from mutmut.mutation import file_mutation

    skip = file_mutation.MutationVisitor._skip_node_and_children
    arrange = file_mutation.function_trampoline_arrangement

    def skip_unless_judge(self: Any, node: Any) -> bool:
        if isinstance(node, cst.FunctionDef) and _declared(node):
            return False
        return skip(self, node)

    def arrange_bare_copies(function: Any, mutants: Any, class_name: str | None) -> Any:
        declarations, methods, assignments, names = arrange(function, mutants, class_name)
        if _declared(function):
            methods = [methods[0], *(m.with_changes(decorators=[]) for m in methods[1:])]
        return declarations, methods, assignments, names

    file_mutation.MutationVisitor._skip_node_and_children = skip_unless_judge
    file_mutation.function_trampoline_arrangement = arrange_bare_copies


def _mutmut_run(children: int) -> int:
    """``mutmut run`` in this process, with the judges reached (fork: its workers inherit
    the patch)."""
    reach_judges()
    from mutmut.__main__ import cli

    cli.main(["run", "--max-children", str(children)], standalone_mode=False)
    return 0


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


# what a surviving mutant changes, by the kinds docs/development.md explains
WORDS_IN = re.compile(r"(^|_)label$|^phase_tag$|^none_completed$|^naming$")  # functions that only make words
FINDING = re.compile(r"\b(passed|failed|unknown|unmet|nothing_at_stake)\($")  # a finding's first argument: its message
EDGES = {"<": "<=", "<=": "<", ">": ">=", ">=": ">"}
MESSAGE_LINE = re.compile(r'^(\+ \(?)?f?"|^(ev|told|outcomes|shown|seen|took)\s*\+?= ')  # a message or a part of one
SLICE = re.compile(r"\[:\d+\]")


def _tokens(lines: list[str]) -> list[tuple[int, str]]:
    text = "\n".join(line.strip() for line in lines) + "\n"
    skip = {tokenize.NEWLINE, tokenize.NL, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER, tokenize.COMMENT}
    try:
        return [(t.type, t.string) for t in tokenize.generate_tokens(io.StringIO(text).readline) if t.type not in skip]
    except (tokenize.TokenError, SyntaxError):
        return []


def _kind(function: str, before: list[str], after: list[str]) -> str:
    """What a mutant changes: ``words`` (a message, a label, a string shown to people; not
    a key of the evidence), ``shown`` (how many examples a message or a list in the
    evidence keeps), ``rounding`` (the digits a figure is rounded to), ``edge`` (a
    comparison's side of equality) or ``logic``."""
    if WORDS_IN.search(function.rsplit("__mutmut", 1)[0].removeprefix("x_")):
        return "words"
    if before and all(MESSAGE_LINE.search(line.strip()) for line in before):
        return "words"
    if len(before) == len(after) == 1 and SLICE.sub("", before[0]) == SLICE.sub("", after[0]):
        return "shown"
    old, new = _tokens(before), _tokens(after)
    changed = [
        (old[i1:i2], new[j1:j2], old[i2 : i2 + 1], old[:i1])
        for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(a=old, b=new, autojunk=False).get_opcodes()
        if tag != "equal"
    ]
    if not changed:
        return "logic"
    if all(
        a and b and {t for t, _ in a + b} == {tokenize.STRING} and nxt != [(tokenize.OP, ":")]
        for a, b, nxt, _ in changed
    ):
        return "words"
    if all(len(a) == len(b) == 1 and EDGES.get(a[0][1]) == b[0][1] for a, b, _, _ in changed):
        return "edge"
    if any("round(" in line for line in before) and all(
        all(t == tokenize.NUMBER or s in ("None", ",", ")") for t, s in a + b) for a, b, _, _ in changed
    ):
        return "rounding"
    if all(FINDING.search(" ".join(s for _, s in head[-2:]).replace(" ", "")) for _, _, _, head in changed):
        return "words"
    return "logic"


def _changes(survivors: list[str]) -> dict[str, tuple[str, list[str], list[str]]]:
    """Each survivor's function and the lines it changes, read from mutmut's copy of the
    sources (the original and each mutant are functions side by side there)."""
    sources: dict[str, dict[str, str]] = {}
    out = {}
    for name in survivors:
        module, _, function = name.rpartition(".")
        if module not in sources:
            path = REPO / "mutants" / (module.replace(".", "/") + ".py")
            text = path.read_text()
            sources[module] = {
                n.name: ast.get_source_segment(text, n) or ""
                for n in ast.walk(ast.parse(text))
                if isinstance(n, ast.FunctionDef)
            }
        short = function.split("ǁ")[-1]
        original = re.sub(r"__mutmut_\d+$", "__mutmut_orig", short)
        a = sources[module].get(original, "").replace(original, "F").splitlines()
        b = sources[module].get(short, "").replace(short, "F").splitlines()
        diff = [
            line
            for line in difflib.unified_diff(a, b, lineterm="", n=0)
            if line[:1] in "+-" and line[:3] not in ("+++", "---")
        ]
        out[name] = (
            function,
            [line[1:] for line in diff if line[0] == "-"],
            [line[1:] for line in diff if line[0] == "+"],
        )
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--report", action="store_true", help="report the last run without running again")
    parser.add_argument("--children", type=int, default=2, help="mutants tested at once (default 2: two cores)")
    parser.add_argument("--mutmut-run", action="store_true", help=argparse.SUPPRESS)  # the child that runs mutmut
    args = parser.parse_args()
    if args.mutmut_run:
        return _mutmut_run(args.children)
    if not MUTMUT.exists():
        print("bench/mutation.py: install mutmut first: .venv/bin/pip install -e '.[dev,mutation]'", file=sys.stderr)
        return 2
    if not args.report:
        t0 = time.monotonic()
        shutil.rmtree(REPO / "mutants", ignore_errors=True)  # mutmut's cache misses a change to the tests
        child = [sys.executable, __file__, "--mutmut-run", "--children", str(args.children)]
        subprocess.run(child, cwd=REPO, timeout=RUN_S, check=False)
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
    kinds = {name: _kind(*change) for name, change in _changes(survivors).items()}
    print("survivors by what they change: " + ", ".join(f"{n} {k}" for k, n in Counter(kinds.values()).most_common()))
    for name in survivors:
        print(f"  {kinds[name]:8} {name}")
    (REPO / "mutants" / "summary.json").write_text(
        json.dumps({"counts": dict(counts), "score": score, "survivors": kinds}, indent=2)
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
