"""``chaos.judge.known``: each check passes on a good history and fails (or is unknown) on a
crafted bad one, histories written by hand."""

from __future__ import annotations

import pytest

from chaos import verdicts as v
from chaos.observe.pipeline import Metric


def _judged(kind: str, status: v.Status, message: str, evidence: dict | None = None, **params: object) -> v.Verdict:
    shown = {"unstruck": "prefill", "after_fault": True} if evidence is None else evidence
    return v.Verdict(kind, f"{kind}(worded freely)", status, message, dict(params), v.Evidence(shown))


def test_a_known_issue_fails_alone_or_the_test_fails_strictly():
    passed = _judged("recovers", v.Status.PASS, "ok")
    failed = _judged("charged_only_where_struck", v.Status.FAIL, "prefill charged")
    known = [v.KnownIssue("charged_only_where_struck", "smg", "1.13.0", "both charged", {"unstruck": "prefill"})]
    with pytest.raises(v.KnownIssueSeen, match=r"KNOWN ISSUE smg 1\.13\.0: both charged.*prefill charged") as seen:
        v.raise_unless_passed([passed, failed], known)
    [(issue, shown)] = seen.value.seen
    assert issue.as_json(shown)["evidence"][0]["kind"] == "charged_only_where_struck"
    with pytest.raises(v.VerdictFailed, match=r"\[FAIL\] no_leak(.|\n)*known issue"):
        v.raise_unless_passed([_judged("no_leak", v.Status.FAIL, "held"), failed], known)
    with pytest.raises(
        v.VerdictFailed, match=r"XPASS\(strict\)\] charged_only_where_struck: known issue not shown \(fine\)"
    ):
        v.raise_unless_passed([passed, _judged("charged_only_where_struck", v.Status.PASS, "fine")], known)
    with pytest.raises(v.VerdictFailed, match="not judged"):
        v.raise_unless_passed([passed], known)
    with pytest.raises(v.VerdictFailed, match=r"\[UNKNOWN\] charged_only_where_struck"):
        v.raise_unless_passed([_judged("charged_only_where_struck", v.Status.UNKNOWN, "no samples")], known)


def test_a_known_issue_names_its_verdict_by_kind_and_params_not_by_words():
    """Rewording a verdict (its name, its message) changes no known issue; a kind whose
    name starts the same is another verdict; params narrow it to one of several."""
    never = v.KnownIssue(
        "counter_never_rises", "smg", "1.13.0", "opens", {"after_fault": True}, params={"counter": ["router", "open"]}
    )
    reworded = _judged("counter_never_rises", v.Status.FAIL, "anything", counter=Metric("router", "open"))
    other = _judged("counter_never_rises", v.Status.PASS, "flat", counter=Metric("decode", "fails"))
    with pytest.raises(v.KnownIssueSeen):
        v.raise_unless_passed([reworded, other], [never])
    prefix = v.KnownIssue("counter_never", "smg", "1.13.0", "opens", {"after_fault": True})
    with pytest.raises(v.VerdictFailed, match="not judged"):
        v.raise_unless_passed([reworded], [prefix])


def test_a_known_race_xfails_where_it_shows_and_passes_where_it_does_not():
    """A known issue that is a race upstream (``strict=False``) excuses its own evidence
    when it shows, nothing else, and does not fail a run where it did not show."""
    race = v.KnownIssue(
        "backstops_stay_idle", "SGLang", "0.5.23", "untold", {"backstops": ["bootstrap timeout"]}, strict=False
    )
    shown = _judged("backstops_stay_idle", v.Status.FAIL, "released", {"backstops": ["bootstrap timeout"]})
    other = _judged("backstops_stay_idle", v.Status.FAIL, "released", {"backstops": ["waiting timeout"]})
    idle = _judged("backstops_stay_idle", v.Status.PASS, "none released", {})
    with pytest.raises(v.KnownIssueSeen):
        v.raise_unless_passed([shown], [race])
    v.raise_unless_passed([idle], [race])  # not shown: a pass, not an XPASS(strict)
    with pytest.raises(v.VerdictFailed, match="not the known issue's evidence"):
        v.raise_unless_passed([other], [race])


@pytest.mark.parametrize(
    ("shape", "values", "fits"),
    [
        ({"outcomes": ["client_timeout"]}, {"outcomes": ["client_timeout"]}, True),
        ({"outcomes": ["client_timeout"]}, {"outcomes": ["client_timeout", "truncated"]}, False),
        ({"outcomes": ["client_timeout"]}, {"outcomes": []}, False),  # nothing failed: not the issue's evidence
        ({"outcomes": ["client_timeout"]}, {"outcomes": "client_timeout"}, True),  # one category, not a list
        ({"outcomes": ["client_timeout"]}, {"statuses": ["client_timeout"]}, False),  # another key
        ({"first_byte": [False]}, {"first_byte": [False, True]}, False),
        ({"worst_s": {"between": [5.0, 16.0]}}, {"worst_s": 5.0}, True),  # closed at both ends
        ({"worst_s": {"between": [5.0, 16.0]}}, {"worst_s": 16.0}, True),
        ({"worst_s": {"between": [5.0, 16.0]}}, {"worst_s": 4.99}, False),
        ({"worst_s": {"between": [5.0, 16.0]}}, {"worst_s": 16.01}, False),
        ({"worst_s": {"between": [5.0, 16.0]}}, {"worst_s": "5.5"}, False),  # not a number
        ({"worst_s": {"between": [5.0, 16.0]}}, {"worst_s": {"between": [5.0, 16.0]}}, False),
        ({"unstruck": "prefill"}, {"unstruck": "prefill", "charged": {"prefill": 3}}, True),
        ({"unstruck": "prefill"}, {"unstruck": "decode"}, False),
        ({"after_fault": True}, {"after_fault": False}, False),
        ({"unstruck": "prefill", "struck": ["decode"]}, {"unstruck": "prefill", "struck": ["prefill"]}, False),
    ],
)
def test_a_known_issues_evidence_shape(shape, values, fits):
    assert v.KnownIssue("k", "c", "1", "b", shape).evidence == shape
    from chaos.judge.known import evidence_fits

    assert evidence_fits(shape, values) is fits


def test_a_known_issue_without_evidence_is_refused():
    with pytest.raises(TypeError, match="declares no evidence"):
        v.KnownIssue("no_leak", "SGLang", "0.5.23", "holds", {})
