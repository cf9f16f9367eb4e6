"""``chaos.observe.history``, judged on histories written by hand."""

from __future__ import annotations

from chaos.observe.history import History
from chaos.observe.records import Outcome
from tests.judge.histories import fault, op, series


def test_history_round_trips_through_jsonl(tmp_path):
    h = History(path=tmp_path / "h.jsonl")
    fault(h, 1.0, 2.0)
    op(h, "a", 0, 1, Outcome.CLEAN_ERROR, error="boom")
    series(h, "decode", "running", [(0.1, 3.0)])
    h.close()
    loaded = History.load(tmp_path / "h.jsonl")
    assert loaded.records == h.records
