"""The soak's pieces that need no stack: its clock, the process readings, the growth report."""

from __future__ import annotations

import os
import socket

import pytest

from chaos.observe.growth import CHECKPOINT, Limit
from chaos.observe.history import History
from chaos.observe.pipeline import Metric
from chaos.observe.records import Sample, TriggerFired
from chaos.observe.sampler import PROCS, Sampler
from chaos.reports.growth import render_growth
from chaos.run.soak import Soak, parse_duration


@pytest.mark.parametrize(("text", "seconds"), [("90s", 90), ("30m", 1800), ("2h", 7200), ("45", 45), ("1.5m", 90)])
def test_durations(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "0", "-5m", "5 minutes", "m"])
def test_a_duration_that_is_none_is_refused(text):
    with pytest.raises(ValueError, match="not a duration"):
        parse_duration(text)


def test_cycles_end_once_the_duration_is_spent_or_the_count_bound(monkeypatch):
    assert sum(1 for _ in Soak(0.05).cycles()) >= 1  # ends: the loop is bounded in time
    monkeypatch.setattr("chaos.run.soak.MAX_CYCLES", 3)
    assert list(Soak(3600).cycles()) == [0, 1, 2]  # and in count


def test_process_trees_are_read_and_more_descriptors_are_seen():
    h = History()
    s = Sampler(h, {})
    s.watch_processes({"rig": os.getpid, "gone": lambda: None})
    try:
        assert s.poll(lambda: s.latest(PROCS) is not None, timeout_s=3)
        before = s.latest(PROCS)
        assert before is not None and before.values["rss_bytes:rig"] > 0 and "open_fds:gone" not in before.values
        # Other tests' threads in this process open and close descriptors of their own: 32 more stand
        # well above that noise, where one more did not (CI, stop 52: 68 before, 67 after).
        extra = [socket.socket() for _ in range(32)]
        opened = h.now()  # a reading stamped later began after the sockets were open
        try:
            assert s.poll(lambda: (last := s.latest(PROCS)) is not None and last.t > opened, timeout_s=3)
            after = s.latest(PROCS)
            assert after is not None and after.values["open_fds:rig"] >= before.values["open_fds:rig"] + 24
        finally:
            for sock in extra:
                sock.close()
    finally:
        s.stop()


def test_the_growth_report_draws_every_quantity(tmp_path):
    h = History()
    for t in range(8):
        h.append(Sample(float(t), PROCS, {"open_fds:decode": 10.0 + t}))
        h.append(TriggerFired(t + 0.1, CHECKPOINT, "quiet"))
    render_growth(
        h,
        [Limit(Metric(PROCS, "open_fds:decode"), 8, unit=" fds"), Limit(Metric(PROCS, "open_fds:router"), 8)],
        tmp_path,
    )
    table = (tmp_path / "soak.md").read_text()
    assert "8 checkpoints" in table and "+3.6e+03 fds" in table and "unknown" in table
    assert (tmp_path / "soak.png").stat().st_size > 0
