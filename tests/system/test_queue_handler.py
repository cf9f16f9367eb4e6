"""The queue handler's arithmetic (``chaos.system.queue_handler``): when a packet goes on, and what its
figures count. Its work on real packets is in tests/faults/test_packet_faults.py."""

from __future__ import annotations

import pytest

from chaos.system.queue_handler import Hold, Stats


def test_a_hold_is_the_delay_within_its_jitter_and_never_before_arrival():
    hold = Hold(5, 10, seed=1)
    waits = [hold.release_at(100.0) - 100.0 for _ in range(2000)]
    assert min(waits) == 0.0  # 5 ms - 10 ms is clamped to going on at once, not before arrival
    assert max(waits) <= 0.015 and max(waits) > 0.014
    assert [Hold(5, 10, seed=1).release_at(0.0) for _ in range(3)] == [Hold(5, 10, seed=1).release_at(0.0)] * 3


def test_no_jitter_holds_each_packet_exactly_the_delay():
    assert {Hold(40, 0, seed=s).release_at(1.0) for s in range(5)} == {1.04}


@pytest.mark.parametrize("bad", [(-1, 0), (10, -1)])
def test_a_negative_delay_or_jitter_is_refused(bad):
    with pytest.raises(ValueError, match="at least 0"):
        Hold(bad[0], bad[1], seed=0)


def test_stats_count_a_packet_released_before_an_earlier_arrival_as_reordered():
    stats = Stats()
    stats.released(100, arrived=1.0, now=1.05)
    stats.released(60, arrived=1.2, now=1.25)
    stats.released(60, arrived=1.1, now=1.26)  # overtaken by the packet that arrived at 1.2
    figures = stats.to_json(held_now=2)
    assert figures["packets"] == 3 and figures["bytes"] == 220 and figures["reordered"] == 1
    assert figures["held_ms_min"] == pytest.approx(50) and figures["held_ms_max"] == pytest.approx(160)
    assert figures["held_ms_mean"] == pytest.approx(260 / 3) and figures["held_now"] == 2


def test_stats_of_nothing_say_nothing_was_held():
    figures = Stats().to_json(held_now=0)
    assert figures["packets"] == 0 and figures["held_ms_mean"] is None and figures["held_ms_min"] is None
