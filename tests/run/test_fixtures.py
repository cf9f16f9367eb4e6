"""The session's fixtures (chaos.run.fixtures) refuse the uses that would cost a run silently."""

from __future__ import annotations

import sys
import textwrap

from chaos.system.procs import run
from chaos.system.tools import REPO_ROOT


def test_a_parametrized_stack_fixture_is_refused_before_a_second_session_stack_starts(tmp_path):
    """pytest hands a module fixture's params to the fixture it overrides when both are named
    ``stack``, and then starts the session's stack anew for each param while the old one keeps
    running (sglang-cpu at 853ea52: three extra SGLang stacks, 165 s). The session's ``stack``
    refuses such a param with a usage error, before it starts anything."""
    suite = tmp_path / "test_parametrized_stack.py"
    suite.write_text(
        textwrap.dedent(
            """
            import pytest

            @pytest.fixture(scope="module", params=["one", "two"])
            def stack(request, stack):
                return stack

            def test_uses_the_stack(stack):
                pass
            """
        )
    )
    done = run(
        [sys.executable, "-m", "pytest", str(suite), "-q", "-p", "chaos.run.plugin", "-p", "no:cacheprovider",
         f"--reports-dir={tmp_path / 'reports'}", f"--rootdir={tmp_path}"],
        cwd=REPO_ROOT, timeout_s=60,
    )  # fmt: skip
    assert done.returncode == 1 and "2 errors" in done.stdout, done.stdout[-3000:]
    assert "a fixture named `stack` takes params ('one')" in done.stdout, done.stdout[-3000:]
    assert not list((tmp_path / "reports").glob("*/stacks/*.json")), "a stack started"
