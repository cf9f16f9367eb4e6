"""The kill matrix's bookkeeping: reading JUnit XML, judging the matrix."""

from __future__ import annotations

from chaos.mutants import MutantResult, matrix_ok, parse_junit, to_json, to_markdown
from tests.ports import port_base

JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" errors="0" failures="1" skipped="1" tests="3">
<testcase classname="suites.test_kv_link" name="test_slow" time="3.0"/>
<testcase classname="suites.test_kv_link" name="test_stuck[crawl]" time="9.1">
<failure message="chaos.verdicts.VerdictFailed: [FAIL] watchdog_fired(decode waiting): did not rise&#10;[FAIL] no_leak: stayed">trace</failure></testcase>
<testcase classname="suites.test_kv_link" name="test_skipped" time="0"><skipped message="lacks kv_link"/></testcase>
</testsuite></testsuites>"""


def test_parse_junit_names_the_first_failing_test_and_verdict(tmp_path):
    path = tmp_path / "r.xml"
    path.write_text(JUNIT)
    run = parse_junit(path)
    assert run.verdict_failures == ["suites/test_kv_link.py::test_stuck[crawl]"] and run.rig_errors == []
    assert run.verdict == "[FAIL] watchdog_fired(decode waiting): did not rise"
    assert run.passed == 1


def test_parse_junit_without_a_file(tmp_path):
    run = parse_junit(tmp_path / "missing.xml")
    assert run.verdict_failures == [] and run.rig_error == "no JUnit XML written"


RIG_SUITE = """
import os
import pytest
from chaos import verdicts as v
from chaos.errors import TargetError, TriggerTimeout
from chaos.history import History


def test_one():
    defect = os.environ["PDSIM_DEFECTS"]
    if defect == "breaks_the_rig":
        raise TriggerTimeout("the trigger never fired")
    if defect == "only_unknown":
        v.expect(History(), v.every_request_terminal(within_s=1))
    if defect == "breaks_a_verdict":
        raise v.VerdictFailed("[FAIL] replies_match_baseline: 1 of 1 replies differ")


@pytest.fixture
def steady():
    if os.environ["PDSIM_DEFECTS"] == "xfail_setup_breaks":
        raise TargetError("target not in steady state before the test")


@pytest.mark.xfail(strict=True, raises=v.VerdictFailed, reason="KNOWN ISSUE: confirmed only by its verdict")
def test_known_issue(steady):
    raise v.VerdictFailed("[FAIL] gauge_stays_at_most: the known behaviour")
"""


def test_only_a_failed_verdict_kills_a_defect(tmp_path, pytestconfig):
    """A defect that only breaks the rig, or leaves a verdict unknown, is not killed; the
    report shows the call-phase rig error as an error, and the JSON names the killing verdict."""
    from chaos.mutants import Killer, _run_one

    (tmp_path / "out").mkdir()
    suite = tmp_path / "test_rig_suite.py"
    suite.write_text(RIG_SUITE)
    (tmp_path / "conftest.py").write_text('pytest_plugins = ["chaos.plugin"]\n')
    runs = {
        d: _run_one(
            d,
            port_base=port_base(pytestconfig, "mutants"),
            out_dir=tmp_path / "out",
            suites=str(suite),
            extra_args=["--rootdir", str(tmp_path)],
            timeout_s=120,
        )
        for d in ("breaks_the_rig", "only_unknown", "breaks_a_verdict", "xfail_setup_breaks")
    }
    rig, unknown, real = runs["breaks_the_rig"], runs["only_unknown"], runs["breaks_a_verdict"]
    assert not rig.killed and rig.state.startswith("not killed (rig error: TriggerTimeout: the trigger never fired")
    assert not unknown.killed and "[UNKNOWN] every_request_terminal" in unknown.state
    assert real.killed and real.verdict == "[FAIL] replies_match_baseline: 1 of 1 replies differ"
    assert '"killed_by": "[FAIL] replies_match_baseline' in to_json([real]) and '"killed_by": ""' in to_json([rig])
    log = (tmp_path / "out" / "breaks_the_rig.log").read_text()
    assert "1 error" in log and " failed" not in log.splitlines()[-1], log[-600:]
    # a known issue is confirmed only by its verdict: a setup that fails is an error, not xfailed
    broken = runs["xfail_setup_breaks"]
    assert not broken.killed and "TargetError" in broken.rig_error
    last = (tmp_path / "out" / "xfail_setup_breaks.log").read_text().splitlines()[-1]
    assert "1 error" in last and "xfailed" not in last, last
    # a defect is killed only by the verdict written for it, not by another failing by chance
    (tmp_path / "elsewhere").mkdir()
    elsewhere = _run_one(
        "breaks_a_verdict",
        port_base=port_base(pytestconfig, "mutants"),
        out_dir=tmp_path / "elsewhere",
        suites=str(suite),
        extra_args=["--rootdir", str(tmp_path)],
        timeout_s=120,
        killer=Killer(str(suite), "recovers"),
    )
    assert not elsewhere.killed and elsewhere.state.startswith(
        "not killed (another verdict failed, not recovers: [FAIL] replies_match_baseline"
    ), elsewhere.state


def test_matrix_ok_needs_a_clean_pass_and_every_defect_killed():
    clean = MutantResult("clean", False, [], 1.0)
    killed = MutantResult("room_mixup", True, ["t"], 1.0, "[FAIL] replies_match_baseline")
    survived = MutantResult("no_heartbeat", False, [], 1.0)
    assert matrix_ok([clean, killed])
    assert not matrix_ok([clean, killed, survived])
    assert not matrix_ok([MutantResult("clean", True, ["t"], 1.0), killed])
    assert '"defect": "room_mixup"' in to_json([killed]) and '"tests_failed": [' in to_json([killed])
    assert "**SURVIVED**" in to_markdown([survived])
    assert (
        "| room_mixup | suites/test_concurrency_integrity.py | killed | [FAIL] replies_match_baseline |"
        in to_markdown([killed])
    )


def test_every_defect_has_its_scenario():
    """The matrix refuses a defect without a named scenario; every named scenario exists."""
    from chaos.mutants import KILLERS, defect_names
    from chaos.tools import REPO_ROOT

    assert set(defect_names()) == set(KILLERS)
    assert all((REPO_ROOT / k.suite.split("::")[0]).is_file() for k in KILLERS.values())
