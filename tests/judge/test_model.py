"""``chaos.judge.model``: each check passes on a good history and fails (or is unknown) on a
crafted bad one, histories written by hand."""

from __future__ import annotations

import pytest

from chaos import verdicts as v
from chaos.observe.history import History
from chaos.observe.pipeline import Metric
from chaos.observe.records import Chunk, Phase
from suites.test_neighbour_stall import stream_gaps_at_most
from tests.judge.histories import fault, op, series


def test_a_verdict_is_data_its_words_are_rendered_from_it():
    h = History()
    fault(h, 1.0, 2.0)
    series(h, "decode", "fails", [(0.5, 0), (1.2, 1), (9.0, 1)])
    judged = v.watchdog_fired("w", Metric("decode", "fails"), timeout_s=3, slack_s=1)(h)
    assert judged.kind == "watchdog_fired" and judged.status is v.Status.FAIL
    assert judged.params == {
        "name": "w",
        "counter": Metric("decode", "fails"),
        "timeout_s": 3,
        "slack_s": 1,
        "since": v.Since.FAULT,
    }
    assert judged.evidence.values["fired_s"] == pytest.approx(0.2) and judged.evidence.at[0] == 1.0
    data = judged.as_json()
    assert data["params"]["counter"] == ["decode", "fails"] and data["params"]["since"] == "fault"
    assert data["evidence"]["values"]["window_s"] == [2.75, 4.0]


def test_a_bound_over_measures_names_each_figure():
    h = History()
    op(h, "a", 0.0, 1.0, phase="fault")
    op(h, "b", 0.0, 3.0, phase="fault")
    for name, gap in (("a", 0.5), ("b", 2.0)):
        for t in (0.2, 0.2 + gap):
            h.append(Chunk(t, name, 10))
    over = stream_gaps_at_most(2.0, phase=Phase.FAULT, why="t")(h)  # 2.0 is within: the bound is closed
    assert over.status is v.Status.PASS
    assert over.evidence.values == {"of": 2, "worst_s": 2.0, "bound_s": 2.0, "at_stake": 2}, over.evidence
    assert over.message == "2 streams, longest gap 2.00s"
    late = stream_gaps_at_most(1.0, phase=Phase.FAULT, why="t")(h)
    assert late.status is v.Status.FAIL and late.evidence.ops == ("b",)
    assert late.evidence.values == {"over": 1, "of": 2, "worst_s": 2.0, "bound_s": 1.0}, late.evidence
    assert late.message.startswith("1 of 2 streams stalled: b (/v1/chat/completions, t=0.00s): 2.00s without")


def test_evidence_as_json_is_plain_data_in_a_stable_order():
    """Sets of mixed kinds sort by their text; what JSON cannot hold is written as text."""
    from pathlib import Path

    from chaos.judge.model import jsonable

    assert jsonable({3, "a", 10}) == [10, 3, "a"]
    assert jsonable(Path("/tmp/x")) == "/tmp/x"
