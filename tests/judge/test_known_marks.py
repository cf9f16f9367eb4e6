"""Every known issue marked in ``suites/`` names its evidence, and excuses only that: a
verdict of its kind failing with evidence of its shape xfails the test; the same verdict
failing with any other evidence fails it; the verdict passing fails it as XPASS (strict)."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

import pytest

from chaos import verdicts as v
from chaos.judge.known import evidence_fits
from chaos.system.tools import REPO_ROOT


def _marks() -> list[tuple[str, v.KnownIssue]]:
    """(test id, issue) for every known_issue mark on a suite's test function."""
    found = []
    for path in sorted((REPO_ROOT / "suites").glob("test_*.py")):
        module = importlib.import_module(f"suites.{path.stem}")
        for name in dir(module):
            fn = getattr(module, name)
            for mark in getattr(fn, "pytestmark", []) if name.startswith("test_") else []:
                if mark.name == "known_issue":
                    kw = mark.kwargs
                    issue = v.KnownIssue(
                        mark.args[0],
                        kw["component"],
                        kw["version"],
                        kw["behaviour"],
                        kw["evidence"],
                        kw.get("params", {}),
                        kw.get("strict", True),
                    )
                    found.append((f"{path.name}::{name}", issue))
    return found


MARKS = _marks()


def _fitting(shape: dict[str, Any]) -> dict[str, Any]:
    """Evidence values of ``shape``: a category it names, a range's lower end, its value."""
    out: dict[str, Any] = {}
    for key, want in shape.items():
        if isinstance(want, dict) and set(want) == {"between"}:
            out[key] = want["between"][0]
        elif isinstance(want, (list, tuple)):
            out[key] = [want[0]]
        else:
            out[key] = want
    return out


def _other(shape: dict[str, Any]) -> dict[str, Any]:
    """Evidence values just outside ``shape``: a category it does not name beside one it
    does, a value past a range's upper end, another value."""
    out = _fitting(shape)
    key, want = next(iter(shape.items()))
    if isinstance(want, dict):
        out[key] = want["between"][1] + 1.0
    elif isinstance(want, (list, tuple)):
        out[key] = [want[0], "something else"]
    else:
        out[key] = not want if isinstance(want, bool) else f"not {want}"
    return out


def _judged(issue: v.KnownIssue, status: v.Status, values: dict[str, Any]) -> v.Verdict:
    return v.Verdict(issue.verdict, issue.verdict, status, "m", dict(issue.params), v.Evidence(values))


def test_the_suites_mark_known_issues():
    assert len(MARKS) >= 7, MARKS  # every mark was found


@pytest.mark.parametrize(("test", "issue"), MARKS, ids=[t for t, _ in MARKS])
def test_a_known_issue_excuses_its_own_evidence_and_nothing_else(test: str, issue: v.KnownIssue):
    fits, other = _fitting(issue.evidence), _other(issue.evidence)
    assert evidence_fits(issue.evidence, fits) and not evidence_fits(issue.evidence, other)
    with pytest.raises(v.KnownIssueSeen):
        v.raise_unless_passed([_judged(issue, v.Status.FAIL, fits)], [issue])
    with pytest.raises(v.VerdictFailed, match="not the known issue's evidence"):
        v.raise_unless_passed([_judged(issue, v.Status.FAIL, other)], [issue])
    passing = [_judged(issue, v.Status.PASS, {})]
    if issue.strict:
        with pytest.raises(v.VerdictFailed, match=r"XPASS\(strict\)"):
            v.raise_unless_passed(passing, [issue])
    else:  # a race: not shown is a pass
        v.raise_unless_passed(passing, [issue])


def test_every_mark_has_its_row_in_the_known_issues():
    text = (Path(REPO_ROOT) / "docs" / "known-issues.md").read_text()
    for test, _ in MARKS:
        assert test.split("::")[1] in text, f"{test} has no row in docs/known-issues.md"
