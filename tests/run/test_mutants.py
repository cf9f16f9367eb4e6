"""The kill matrix's bookkeeping: reading the runs' results, judging the matrix."""

from __future__ import annotations

from chaos.run.mutants import Killer, MutantResult, matrix_ok, read_run, to_json, to_markdown
from chaos.run.results import TestResult
from tests.ports import port_base


def _result(test: str, outcome: str, *verdicts: tuple[str, str, str], message: str = "") -> TestResult:
    """A result.json as the history fixture writes it: (kind, role, status) per verdict."""
    return TestResult.from_json(
        {
            "test": test,
            "outcome": outcome,
            "message": message,
            "verdicts": [
                {"kind": k, "role": r, "status": st, "name": f"{k}(x)", "message": f"said {st}", "params": {"n": 1}}
                for k, r, st in verdicts
            ],
        }
    )


def test_read_run_counts_kills_rig_errors_and_unknowns_from_results():
    run = read_run(
        [
            _result("t::slow", "passed", ("recovers", "verdict", "pass")),
            _result("t::stuck", "failed", ("watchdog_fired", "verdict", "fail"), ("no_leak", "verdict", "fail")),
            _result("t::void", "error", ("requests_affected", "premise", "unmet"), ("no_leak", "verdict", "pass")),
            _result("t::skipped", "skipped"),
        ]
    )
    assert run.verdict_failures == ["t::stuck"] and run.rig_errors == ["t::void"] and run.passed == 1
    assert [v.kind for v in run.failed_verdicts] == ["watchdog_fired", "no_leak"]
    assert run.why_not == "rig error: [UNMET] requests_affected(x): said unmet"
    unsure = read_run([_result("t::blind", "failed", ("no_leak", "verdict", "unknown"))])
    assert unsure.verdict_failures == [] and unsure.why_not == "only [UNKNOWN] no_leak(x): said unknown"
    crashed = read_run([_result("t::e", "error", message="TargetError: down\ntrace")])
    assert crashed.why_not == "rig error: TargetError: down"


def test_a_killer_names_a_verdict_by_kind_and_params_never_by_its_words():
    judged = _result("t", "failed", ("counter_never_rises", "verdict", "fail")).verdicts[0]
    assert Killer("s", "counter_never_rises").kills(judged)
    assert Killer("s", "counter_never_rises", params={"n": 1}).kills(judged)
    assert not Killer("s", "counter_never_rises", params={"n": 2}).kills(judged)
    assert not Killer("s", "counter_never").kills(judged)  # no prefix of a kind matches
    reworded = TestResult.from_json(
        {
            "test": "t",
            "outcome": "failed",
            "verdicts": [
                {
                    "kind": "counter_never_rises",
                    "role": "verdict",
                    "status": "fail",
                    "name": "other words",
                    "message": "?",
                }
            ],
        }
    )
    assert Killer("s", "counter_never_rises").kills(reworded.verdicts[0])


RIG_CONFTEST = """
pytest_plugins = ["chaos.run.plugin"]
import pytest

from chaos.system.topology import Topology


class _Info:
    kind, port_base, run_id = "none", 0, "rig"
    topology = Topology()


class _NoStack:
    \"\"\"No stack: the matrix's bookkeeping is what these tests are about.\"\"\"

    info = _Info()

    def logs(self, service):
        return ""


@pytest.fixture(scope="session")
def stack():
    return _NoStack()
"""

RIG_SUITE = """
import os
import pytest
from chaos import verdicts as v
from chaos.errors import TargetError, TriggerTimeout


@v.verdict(lambda **_: "replies_match_baseline")
def replies_match_baseline(h):
    return v.failed("1 of 1 replies differ", wrong=1)


def test_one(history):
    defect = os.environ["PDSIM_DEFECTS"]
    if defect == "breaks_the_rig":
        raise TriggerTimeout("the trigger never fired")
    if defect == "only_unknown":
        v.expect(history, v.every_request_terminal(within_s=1))
    if defect == "breaks_a_verdict":
        v.expect(history, replies_match_baseline())


@pytest.fixture
def steady():
    if os.environ["PDSIM_DEFECTS"] == "setup_breaks":
        raise TargetError("target not in steady state before the test")


def test_setup(history, steady):
    pass
"""


def test_only_a_failed_verdict_kills_a_defect(tmp_path, pytestconfig):
    """A defect that only breaks the rig, or leaves a verdict unknown, is not killed; the
    report shows the call-phase rig error as an error, and the JSON names the killing verdict."""
    from chaos.run.mutants import Killer, _run_one

    (tmp_path / "out").mkdir()
    suite = tmp_path / "test_rig_suite.py"
    suite.write_text(RIG_SUITE)
    (tmp_path / "conftest.py").write_text(RIG_CONFTEST)
    runs = {
        d: _run_one(
            d,
            port_base=port_base(pytestconfig, "mutants"),
            out_dir=tmp_path / "out",
            suites=str(suite),
            extra_args=["--rootdir", str(tmp_path)],
            timeout_s=120,
        )
        for d in ("breaks_the_rig", "only_unknown", "breaks_a_verdict", "setup_breaks")
    }
    rig, unknown, real = runs["breaks_the_rig"], runs["only_unknown"], runs["breaks_a_verdict"]
    assert (
        not rig.killed
        and rig.state.startswith("not killed (rig error: ")
        and "TriggerTimeout: the trigger" in rig.state
    )
    assert not unknown.killed and "[NOT_AT_STAKE] every_request_terminal" in unknown.state
    assert real.killed and real.verdict == "[FAIL] replies_match_baseline: 1 of 1 replies differ", real
    assert '"killed_by": "[FAIL] replies_match_baseline' in to_json([real]) and '"killed_by": ""' in to_json([rig])
    log = (tmp_path / "out" / "breaks_the_rig.log").read_text()
    assert "1 error" in log and " failed" not in log.splitlines()[-1], log[-600:]
    # a setup that fails is an error with its reason, never a kill
    broken = runs["setup_breaks"]
    assert not broken.killed and "TargetError" in broken.rig_error, broken
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


CLEAN_SUITE = """
import os
import pytest
from chaos.run.skips import SkipKind, skip

HOW = os.environ.get("CLEAN_HOW", "")


@pytest.mark.skipif(HOW == "all_skipped", reason="skipped by something the rig does not declare")
def test_runs(history):
    if HOW == "declared_only":
        skip(SkipKind.TARGET, "the target cannot start this test's stack")


@pytest.mark.xfail(reason="an expected failure is not a skip", strict=True)
def test_known_to_fail():
    assert HOW == "never"


@pytest.mark.needs("defects")  # pdsim's alone: sglang-cpu lacks it
def test_needs_what_no_target_has(history):
    pass
"""


def test_the_clean_run_passes_only_where_it_ran_what_it_collected(tmp_path, pytestconfig, monkeypatch):
    """The clean run passes on a passed test beside a capability skip; it fails where
    every test skipped for an undeclared reason, or where none passed (declared skips
    alone), and says why."""
    from chaos.run.mutants import _run_one

    suite = tmp_path / "test_clean_suite.py"
    suite.write_text(CLEAN_SUITE)
    (tmp_path / "conftest.py").write_text(RIG_CONFTEST)
    runs = {}
    for how in ("ran", "all_skipped", "declared_only"):
        monkeypatch.setenv("CLEAN_HOW", how)
        (tmp_path / how).mkdir()
        runs[how] = _run_one(
            "clean",
            port_base=port_base(pytestconfig, "mutants"),
            out_dir=tmp_path / how,
            suites=str(suite),
            extra_args=["--rootdir", str(tmp_path), "--target", "sglang-cpu"],  # nothing starts: no stack is asked for
            timeout_s=120,
        )
    assert runs["ran"].as_expected and runs["ran"].passed == 1, runs["ran"]
    skipped = runs["all_skipped"]
    assert not skipped.as_expected and "skipped 1 test(s) for no declared reason" in skipped.rig_error, skipped
    assert "test_runs" in skipped.rig_error, skipped
    idle = runs["declared_only"]
    assert not idle.as_expected and idle.rig_error == "the clean run passed no test", idle


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
    from chaos.run.mutants import KILLERS, defect_names
    from chaos.system.tools import REPO_ROOT

    assert set(defect_names()) == set(KILLERS)
    assert all((REPO_ROOT / k.suite.split("::")[0]).is_file() for k in KILLERS.values())
