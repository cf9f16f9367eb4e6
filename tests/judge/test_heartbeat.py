"""``chaos.judge.heartbeat``: each check passes on a good history and fails (or is unknown) on
a crafted bad one, histories written by hand."""

from __future__ import annotations

from chaos import verdicts as v
from chaos.observe.history import History
from chaos.observe.records import FaultEvent, Stage, TriggerFired
from tests.judge.histories import status


def test_decode_gives_prefill_up():
    """Each held fault must end by decode's line, not by its hold running out."""
    from chaos.observe.pipeline import PREFILL_LOST

    check = v.decode_gives_prefill_up(held=2)
    h = History()
    h.append(TriggerFired(9.0, f"heal once log line /{PREFILL_LOST}/ in decode", "Lost connection with prefill"))
    assert status(check, h) is v.Status.FAIL and "1 of 2 held faults ran out" in check(h).message
    h.append(TriggerFired(30.0, f"heal once log line /{PREFILL_LOST}/ in decode", "Lost connection with prefill"))
    assert status(check, h) is v.Status.PASS
    other = History()
    other.append(TriggerFired(1.0, "requests at decode >= 1", "1"))  # a fault's own trigger is not a give-up
    assert status(v.decode_gives_prefill_up(held=1), other) is v.Status.FAIL


def test_decode_gives_a_prefill_up_within_both_sides_of_its_window():
    """A held fault healed by decode's line passes no sooner than its misses allow; sooner,
    the heartbeat gave up on fewer misses than it is set to; never, the hold ran out."""
    from chaos.observe.pipeline import PREFILL_LOST
    from chaos.observe.records import HEAL_ONCE

    def held(given_up_at: float | None) -> History:
        h = History()
        h.append(FaultEvent(1.0, 0.0, "bh#1", Stage.INJECT, "blackhole bootstrap"))
        if given_up_at is not None:
            h.append(TriggerFired(given_up_at, f"{HEAL_ONCE} log decode: {PREFILL_LOST}", "seen"))
        h.append(FaultEvent((given_up_at or 12.0) + 0.1, 0.0, "bh#1", Stage.HEALED, "blackhole bootstrap"))
        return h

    check = v.decode_gives_prefill_up(held=1, no_sooner_s=8.0)
    on_time = check(held(9.5))
    assert on_time.status is v.Status.PASS and on_time.evidence.values["given_up_s"] == [8.5], on_time
    early = check(held(5.0))
    assert early.status is v.Status.FAIL and early.evidence.values == {"given_up_s": [4.0], "no_sooner_s": 8.0}
    never = check(held(None))
    assert never.status is v.Status.FAIL and never.evidence.values == {"held": 1, "given_up": 0}
    assert v.decode_gives_prefill_up(held=1)(held(5.0)).status is v.Status.PASS  # no lower bound asked


def test_the_heartbeats_soonest_give_up_counts_its_misses():
    from dataclasses import replace

    from chaos.run.bounds import Bounds

    b = Bounds(3, 6, 10, 10, 2.0, 2, 1, 30, 5, 1.5, 2, 10, 5)
    assert b.heartbeat_no_sooner_s(3.0) == 2.0 + 2 * 3.0  # one wait between two misses, each a read timeout
    assert b.heartbeat_no_sooner_s(0.0) == 2.0
    assert replace(b, heartbeat_interval_s=0.5).heartbeat_no_sooner_s(0.0) == 2.0  # SGLang floors the interval
    assert replace(b, heartbeat_max_failure=3).heartbeat_no_sooner_s(1.0) == 4.0 + 3.0


def test_only_a_heal_on_decode_s_word_counts_as_giving_up():
    """A heal the hold ran out (another trigger) is not decode giving its prefill up."""
    from chaos.observe.pipeline import PREFILL_LOST
    from chaos.observe.records import HEAL_ONCE

    h = History()
    h.append(FaultEvent(1.0, 0.0, "packet#1", Stage.INJECT, "blackhole kv"))
    h.append(TriggerFired(4.0, f"{HEAL_ONCE} hold ran out", "timeout"))
    h.append(TriggerFired(5.0, f"other {PREFILL_LOST}", "seen"))
    assert v.decode_gives_prefill_up(held=1)(h).status is v.Status.FAIL
