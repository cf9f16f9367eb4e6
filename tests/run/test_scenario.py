"""The scenario kit, run as a user runs it (pytest on a suite file, against the embedded
stack): verdicts are judged after the body even when it raised, a scenario without a
verdict is an error, and the README's scenario template passes."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from chaos.system.procs import run
from tests.ports import port_base

ROOT = Path(__file__).resolve().parents[2]

KIT_SUITE = '''
import pytest

from chaos import verdicts as v
from chaos.errors import TriggerTimeout
from chaos.observe.history import Phase
from tests.ports import port_base


def test_body_raises(scenario, workload):
    scenario.judge(v.every_request_terminal(within_s=30), v.recovers(within_s=1))
    workload.request("/v1/chat/completions", workload.chat("hi", max_tokens=2), phase=Phase.FAULT)
    raise TriggerTimeout("the trigger never fired")


def test_no_verdict(scenario, workload):
    workload.request("/v1/chat/completions", workload.chat("hi", max_tokens=2))


def test_unknown_fails_after_the_body(scenario, workload):
    scenario.judge(v.recovers(within_s=1))  # no fault, so no heal: unknown
    workload.request("/v1/chat/completions", workload.chat("hi", max_tokens=2))


@pytest.mark.known_issue("outcomes_in", component="upstream", version="1.0", behaviour="no request succeeds", evidence={"outcomes": ["clean_error"]})
def test_known_issue_seen(scenario, workload):
    scenario.judge(v.every_request_terminal(within_s=30), v.outcomes_in(set()))
    workload.request("/v1/chat/completions", workload.chat("word " * 70000, max_tokens=2))  # over any context: a 400


@pytest.mark.known_issue("outcomes_in", component="upstream", version="1.0", behaviour="no request succeeds", evidence={"outcomes": ["clean_error"]}, lacking="inflight_watchdog")
def test_known_issue_only_where_lacking(scenario, workload):  # the embedded stack has the watchdog
    scenario.judge(v.every_request_terminal(within_s=30), v.outcomes_in(set()))
    workload.request("/v1/chat/completions", workload.chat("word " * 70000, max_tokens=2))


def test_window_outlasts_the_body(scenario, workload, faults):
    """The body ends right after its fault; the declared window closes 2.5 s later."""
    from chaos.observe.pipeline import Metric

    scenario.judge(v.watchdog_fired("none here", Metric("prefill", "num_bootstrap_failed_reqs_total"), timeout_s=2, slack_s=0.5))
    with faults.latency("client_router", 1):
        workload.request("/v1/chat/completions", workload.chat("hi", max_tokens=2), phase=Phase.FAULT)


@pytest.mark.known_issue("outcomes_in", component="upstream", version="1.0", behaviour="no request succeeds", evidence={"outcomes": ["clean_error"]})
def test_known_issue_gone(scenario, workload):
    scenario.judge(v.outcomes_in(set()))
    workload.request("/v1/chat/completions", workload.chat("hi", max_tokens=2))


@pytest.mark.known_issue("outcomes_in", component="upstream", version="1.0", behaviour="no request succeeds", evidence={"outcomes": ["client_timeout"]})
def test_known_issue_other_evidence(scenario, workload):  # the same verdict fails, but not as the issue does
    scenario.judge(v.every_request_terminal(within_s=30), v.outcomes_in(set()))
    workload.request("/v1/chat/completions", workload.chat("word " * 70000, max_tokens=2))


def test_body_times_out(scenario, workload):  # not the rig's RigError, not a verdict: still an error
    scenario.judge(v.every_request_terminal(within_s=30))
    workload.request("/v1/chat/completions", workload.chat("hi", max_tokens=2))
    raise TimeoutError("the background load did not end in 1s")


def test_nothing_at_stake(scenario, workload):  # its verdict's phase held no request: not a pass
    scenario.judge(v.outcomes_in(set(), phase=Phase.FAULT))
    workload.request("/v1/chat/completions", workload.chat("hi", max_tokens=2))
'''


def _template() -> str:
    """The first python block of the README's "Writing a scenario" section."""
    section = (ROOT / "README.md").read_text().split("## Writing a scenario", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)  # type: ignore[union-attr]


def _results(reports: Path) -> dict[str, dict]:
    return {r["test"].split("::")[-1]: r for r in (json.loads(p.read_text()) for p in reports.glob("*/*/result.json"))}


def _kit(tmp_path: Path, what: str, base: int, reports: str, *args: str) -> subprocess.CompletedProcess[str]:
    """pytest on the kit's own tests (written under ``tmp_path``), reports in ``reports``."""
    return run(
        [sys.executable, "-m", "pytest", what, "-q", "-p", "no:cacheprovider", "--rootdir", str(tmp_path),
         f"--port-base={base}", f"--reports-dir={tmp_path / reports}", *args],
        cwd=ROOT,
        timeout_s=240,
    )  # fmt: skip


def test_kit_judges_after_the_body_and_the_template_runs(tmp_path, pytestconfig):
    (tmp_path / "test_kit.py").write_text(KIT_SUITE)
    (tmp_path / "test_template.py").write_text(_template())
    (tmp_path / "conftest.py").write_text('pytest_plugins = ["chaos.run.plugin"]\n')
    base = port_base(pytestconfig, "scenario")
    done = _kit(tmp_path, str(tmp_path), base, "reports")
    results = _results(tmp_path / "reports")
    assert set(results) >= {
        "test_body_raises",
        "test_unknown_fails_after_the_body",
        "test_slow_kv_link_during_a_conversation",
    }, done.stdout[-3000:]

    raised = results["test_body_raises"]
    assert raised["outcome"] == "error", raised  # the body's rig error stays the outcome
    verdicts = {v["kind"]: v["status"] for v in raised["verdicts"]}
    assert verdicts == {"every_request_terminal": "pass", "recovers": "unknown"}, raised["verdicts"]

    unknown = results["test_unknown_fails_after_the_body"]
    assert unknown["outcome"] == "failed" and "[UNKNOWN] recovers" in unknown["message"], unknown

    assert "test_no_verdict" in done.stdout and "NoVerdict" in done.stdout, done.stdout[-3000:]
    assert results["test_no_verdict"]["outcome"] == "error", results["test_no_verdict"]

    # a verdict marked known_issue: failing alone, an xfail with the issue's words; passing, a strict failure
    seen, gone = results["test_known_issue_seen"], results["test_known_issue_gone"]
    assert seen["outcome"] == "xfailed" and "no request succeeds" in seen["known_issue"], seen
    [issue] = seen["known"]  # the issue as data, with the evidence record that shows it
    assert (issue["component"], issue["version"], issue["evidence"][0]["kind"]) == ("upstream", "1.0", "outcomes_in")
    assert issue["evidence"][0]["status"] == "fail" and issue["evidence"][0]["evidence"]["ops"], issue
    assert gone["outcome"] == "failed" and "XPASS(strict)] outcomes_in" in gone["message"], gone
    # a known issue of engines lacking a capability is no excuse on a target that has it
    where = results["test_known_issue_only_where_lacking"]
    assert where["outcome"] == "failed" and "[FAIL] outcomes_in" in where["message"] and not where["known_issue"], where
    # the same verdict failing with other evidence than the issue's is a failure, named as such
    other = results["test_known_issue_other_evidence"]
    assert other["outcome"] == "failed" and "not the known issue's evidence" in other["message"], other
    # an exception in a body that is neither the rig's nor a verdict's is an error naming where
    timed_out = results["test_body_times_out"]
    assert timed_out["outcome"] == "error", timed_out
    assert "TimeoutError: the background load did not end in 1s (in test_body_times_out at" in timed_out["message"]
    # a verdict of the test's own with nothing at stake keeps the test from passing
    idle = results["test_nothing_at_stake"]
    assert idle["outcome"] == "failed" and [v["status"] for v in idle["verdicts"]] == ["not_at_stake"], idle

    # the scenario kept sampling through its verdict's window: judged on the whole window
    # (no rise: fail), not on samples that ended with the body (unknown)
    window = results["test_window_outlasts_the_body"]
    assert window["outcome"] == "failed" and "did not rise inside the window" in window["message"], window

    template = results["test_slow_kv_link_during_a_conversation"]
    assert template["outcome"] == "passed", template
    by_settle = {v["kind"] for v in template["verdicts"] if v["by"] == "settle"}  # the kit's own, named as such
    assert by_settle == {"no_leak", "recovers", "charged_only_where_struck", "failures_reach_the_client"}
    # a KV link's latency strikes both engines: no worker could be charged wrongly, which the
    # kit's breaker verdict says (not at stake), and which does not keep the test from passing
    # (and no decode attempt failed, so none was at stake of being hidden)
    statuses = {v["kind"]: v["status"] for v in template["verdicts"]}
    assert statuses.pop("charged_only_where_struck") == "not_at_stake", template["verdicts"]
    assert statuses.pop("failures_reach_the_client") == "not_at_stake", template["verdicts"]
    assert set(statuses.values()) == {"pass"} and len(template["verdicts"]) == 9, template["verdicts"]

    # a failed or errored test's report keeps each service's log since it began; a passed one's does not
    for result_file in (tmp_path / "reports").glob("*/*/result.json"):
        outcome = json.loads(result_file.read_text())["outcome"]
        logs = sorted(p.name for p in (result_file.parent / "logs").glob("*.log"))
        assert logs == (["decode.log", "prefill.log", "router.log"] if outcome in ("failed", "error") else []), (
            result_file,
            outcome,
        )
    raised_logs = next((tmp_path / "reports").glob("*/*test_body_raises*")) / "logs"
    assert "xrid=" in (raised_logs / "decode.log").read_text(), (
        "decode's log of the failed test has none of its requests"
    )
    summary = next((tmp_path / "reports").glob("*/summary.md")).read_text()
    assert f"- embedded on port base {base}, model pdsim/deterministic-1" in summary, summary[-1500:]

    # --stop-at-verdict ends the session at a failed verdict, not at one only unknown
    stopped = _kit(
        tmp_path,
        str(tmp_path / "test_kit.py"),
        base,
        "stopped",
        "--stop-at-verdict",
        "-k",
        "unknown_fails or only_where_lacking or known_issue_gone",
    )
    ran = _results(tmp_path / "stopped")
    assert set(ran) == {"test_unknown_fails_after_the_body", "test_known_issue_only_where_lacking"}, stopped.stdout[
        -3000:
    ]
    assert (
        "a verdict failed in" in stopped.stdout
        and "test_known_issue_only_where_lacking" in stopped.stdout.split("a verdict failed in")[1]
    ), stopped.stdout[-1500:]
