"""``chaos.judge.declare``: each check passes on a good history and fails (or is unknown) on a
crafted bad one, histories written by hand."""

from __future__ import annotations

from typing import Callable, cast

from chaos import verdicts as v
from chaos.observe.history import History
from chaos.observe.records import Complete, Invoke, Outcome, Phase
from chaos.system.tools import REPO_ROOT
from tests.judge.histories import status


def _doc_verdict() -> dict[str, object]:
    """The python block of docs/writing-a-suite.md's "Writing a new verdict", executed."""
    section = (REPO_ROOT / "docs" / "writing-a-suite.md").read_text().split("## Writing a new verdict", 1)[1]
    code = section.split("```python\n", 1)[1].split("```", 1)[0]
    namespace: dict[str, object] = {}
    exec(compile(code, "writing-a-suite.md", "exec"), namespace)
    return namespace


def test_the_documented_new_verdict_runs_and_judges():
    first_byte_within = cast(Callable[..., v.Check], _doc_verdict()["first_byte_within"])
    check = first_byte_within(1.0, phase=Phase.FAULT)
    quick, slow, none = History(), History(), History()
    for h, first in ((quick, 0.4), (slow, 2.5)):
        h.append(Invoke(0.0, 0.0, "a", "/v1/chat/completions", True, "", -1, "", Phase.FAULT))
        h.append(Complete(3.0, 0.0, "a", Outcome.OK, 200, "", "r", None, 2, first_byte_t=first))
    assert check.kind == "first_byte_within" and check.name == "first_byte_within(1s, fault)"
    assert status(check, quick) is v.Status.PASS
    judged = check(slow)
    assert judged.status is v.Status.FAIL and judged.evidence.ops == ("a",) and judged.evidence.values["worst_s"] == 2.5
    assert status(check, none) is v.Status.NOT_AT_STAKE


def test_each_declared_check_is_listed_with_its_role_and_module():
    from chaos.judge.declare import DECLARED

    assert DECLARED["no_leak"] == (v.Role.VERDICT, "chaos.judge.gauges")
    assert DECLARED["open_at_fault"] == (v.Role.PREMISE, "chaos.judge.premises")
