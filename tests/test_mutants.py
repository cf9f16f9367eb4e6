"""The kill matrix's bookkeeping: reading JUnit XML, judging the matrix."""

from __future__ import annotations

from chaos.mutants import MutantResult, parse_junit, matrix_ok, to_json, to_markdown

JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" errors="0" failures="1" skipped="1" tests="3">
<testcase classname="suites.test_kv_link" name="test_slow" time="3.0"/>
<testcase classname="suites.test_kv_link" name="test_stuck[crawl]" time="9.1">
<failure message="chaos.verdicts.VerdictFailed: [FAIL] watchdog_fired(decode waiting): did not rise&#10;[FAIL] no_leak: stayed">trace</failure></testcase>
<testcase classname="suites.test_kv_link" name="test_skipped" time="0"><skipped message="lacks proxied_kv"/></testcase>
</testsuite></testsuites>"""


def test_parse_junit_names_the_first_failing_test_and_verdict(tmp_path):
    path = tmp_path / "r.xml"
    path.write_text(JUNIT)
    failed, verdict, passed = parse_junit(path)
    assert failed == ["suites/test_kv_link.py::test_stuck[crawl]"]
    assert verdict == "[FAIL] watchdog_fired(decode waiting): did not rise"
    assert passed == 1


def test_parse_junit_without_a_file(tmp_path):
    assert parse_junit(tmp_path / "missing.xml") == ([], "no JUnit XML written", 0)


def test_matrix_ok_needs_a_clean_pass_and_every_defect_killed():
    clean = MutantResult("clean", False, [], 1.0)
    killed = MutantResult("room_mixup", True, ["t"], 1.0, "[FAIL] replies_match_baseline")
    survived = MutantResult("no_heartbeat", False, [], 1.0)
    assert matrix_ok([clean, killed])
    assert not matrix_ok([clean, killed, survived])
    assert not matrix_ok([MutantResult("clean", True, ["t"], 1.0), killed])
    assert '"defect": "room_mixup"' in to_json([killed]) and '"tests_failed": [' in to_json([killed])
    assert "**SURVIVED**" in to_markdown([survived])
