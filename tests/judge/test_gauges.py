"""``chaos.judge.gauges``: each check passes on a good history and fails (or is unknown) on a
crafted bad one, histories written by hand."""

from __future__ import annotations

from chaos import verdicts as v
from chaos.observe.history import History
from chaos.observe.records import FaultEvent, Sample, Stage
from chaos.observe.sampler import merged
from tests.judge.histories import fault, op, series, status


def test_no_leak():
    check = v.no_leak(gauges=[("prefill", "inflight")], within_s=3)
    back, stuck, blind = History(), History(), History()
    for h in (back, stuck, blind):
        fault(h, 1.0, 2.0)
    series(back, "prefill", "inflight", [(0.5, 0), (1.5, 2), (2.5, 1), (4.0, 0)])
    series(stuck, "prefill", "inflight", [(0.5, 0), (1.5, 2), (2.5, 2), (4.9, 2)])
    series(blind, "prefill", "inflight", [(0.5, 0), (1.5, 2)])
    assert status(check, back) is v.Status.PASS
    assert status(check, stuck) is v.Status.FAIL and "stayed above its baseline 0" in check(stuck).message
    assert status(check, blind) is v.Status.UNKNOWN
    quiet = v.no_leak(gauges=[("prefill", "inflight")], within_s=1, since=v.Since.QUIET)
    busy = History()
    fault(busy, 1.0, 2.0)
    op(busy, "late", 2.0, 6.0)
    series(busy, "prefill", "inflight", [(0.5, 0), (3.0, 1), (5.9, 1), (6.5, 0)])
    assert status(quiet, busy) is v.Status.PASS  # load after the heal is not a leak


def test_the_quiet_moment_is_the_scenarios_not_the_rigs_probe():
    """``Since.QUIET`` is when the scenario's last request ended: the recovery probe that
    settle sends once the leak window is covered does not move it, so a gauge held through
    the window and freed only by the probe's own request is a leak."""
    quiet = v.no_leak(gauges=[("decode", "num_used_tokens")], within_s=2, since=v.Since.QUIET)
    h = History()
    fault(h, 1.0, 2.0)
    op(h, "load", 1.5, 3.0)
    op(h, "probe", 5.5, 5.6, phase="probe")
    series(h, "decode", "num_used_tokens", [(0.5, 0), (3.1, 40), (4.9, 40), (5.6, 0), (7.0, 0)])
    judged = quiet(h)
    assert judged.status is v.Status.FAIL and judged.evidence.values["held"] == ["decode:num_used_tokens"]
    assert list(judged.evidence.at) == [3.0]  # counted from the load's end, not the probe's


def _pages(h: History, source: str, name: str, points: list[tuple[float, float, float]]) -> None:
    """Samples of one count on an engine's two pages: (t, /v1/loads, /metrics)."""
    for t, live, said in points:
        h.append(Sample(t, source, merged([{name: said}, {name: live}])))


def test_two_pages_of_one_count_are_held_to_each_other():
    """``sources_agree``: what /metrics says of a count, /v1/loads said too within half a
    second, for more than one sample. A /metrics reading that repeats an older live value
    is stale (SGLang's /metrics, refreshed per logged batch); one /v1/loads never showed is
    unread: one page lies."""
    check = v.sources_agree(engines=["decode"])
    name = "num_decode_transfer_queue_reqs"
    agree, stale, lie, idle = History(), History(), History(), History()
    _pages(agree, "decode", name, [(0.0, 0, 0), (0.1, 3, 0), (0.2, 3, 3), (0.3, 0, 3), (0.4, 0, 0)])
    _pages(stale, "decode", name, [(0.0, 0, 0), (0.1, 3, 0), (1.0, 3, 0), (1.1, 3, 0), (2.0, 0, 0)])
    _pages(lie, "decode", name, [(0.0, 0, 0), (0.1, 0, 3), (1.0, 0, 3), (2.0, 0, 0)])
    _pages(idle, "decode", name, [(0.0, 0, 0), (1.0, 0, 0)])
    assert check(agree).status is v.Status.PASS and check(agree).evidence.values["readings"] == 5
    held = check(stale)
    assert held.status is v.Status.FAIL and held.evidence.values["kinds"] == ["stale"]
    assert held.evidence.values["disagreed"] == {f"decode:{name}": 2}  # 0 at 1.0 and 1.1s: live read 3 all around
    assert held.evidence.values["figures"] == [f"decode:{name}"]  # what a known issue's evidence names
    lied = check(lie)
    assert lied.status is v.Status.FAIL and lied.evidence.values["kinds"] == ["unread"]
    assert check(idle).status is v.Status.NOT_AT_STAKE
    assert check(History()).status is v.Status.UNKNOWN


def test_a_count_read_on_the_move_agrees_only_within_its_bracket():
    """The /metrics of a sample is fetched after the previous sample's /v1/loads and
    before its own: three requests of 322 tokens arriving in between can show 322 there
    (CI of 2026-12-06, compose: 0, 322, 966), never 1000 or a value after the move."""
    check = v.sources_agree(engines=["prefill"])
    name = "num_used_tokens"
    moving, beyond, late = History(), History(), History()
    _pages(moving, "prefill", name, [(0.0, 0, 0), (0.1, 966, 322), (0.2, 966, 966)])
    _pages(beyond, "prefill", name, [(0.0, 0, 0), (0.1, 966, 1000), (0.2, 966, 1000), (0.3, 966, 966)])
    _pages(late, "prefill", name, [(0.0, 0, 0), (0.1, 966, 966), (0.2, 966, 322), (0.3, 966, 322), (0.9, 966, 966)])
    assert check(moving).status is v.Status.PASS and check(moving).evidence.values["blips"] == {}
    assert check(beyond).status is v.Status.FAIL and check(beyond).evidence.values["kinds"] == ["unread"]
    assert check(late).status is v.Status.FAIL  # 322 after the count had settled at 966


def test_a_lone_disagreement_is_a_blip_not_a_lie():
    """A request that comes and goes between two reads of the live count shows on /metrics
    alone (kill matrix of 2026-12-06: 12 tokens on prefill's /metrics, 0 on /v1/loads before
    and after): counted as a blip; the same reading twice in a row is a lie."""
    check = v.sources_agree(engines=["prefill"])
    name = "num_used_tokens"
    blip, twice = History(), History()
    _pages(blip, "prefill", name, [(0.0, 0, 0), (0.1, 0, 12), (0.2, 0, 0), (0.3, 5, 5)])
    _pages(twice, "prefill", name, [(0.0, 0, 0), (0.1, 0, 12), (0.2, 0, 12), (0.3, 5, 5)])
    passed = check(blip)
    assert passed.status is v.Status.PASS and passed.evidence.values["blips"] == {f"prefill:{name}": 1}
    lied = check(twice)
    assert lied.status is v.Status.FAIL and lied.evidence.values["disagreed"] == {f"prefill:{name}": 2}


def test_no_leak_since_the_last_fault_counts_from_the_fault_that_struck():
    """A crawl set the stage at t=1, decode was killed at t=3, and prefill held its rooms
    until t=7: from the first fault, the gauge was at baseline (the rooms had not come yet),
    which says nothing; from the last, the rooms stayed 4 s."""
    h = History()
    h.append(FaultEvent(1.0, 0.0, "packet#1", Stage.INJECT, "crawl on kv"))
    h.append(FaultEvent(3.0, 0.0, "kill#2", Stage.INJECT, "SIGKILL decode"))
    h.append(FaultEvent(9.0, 0.0, "kill#2", Stage.HEALED, "SIGKILL decode"))
    h.append(FaultEvent(9.5, 0.0, "packet#1", Stage.HEALED, "crawl on kv"))
    series(h, "prefill", "inflight", [(0.5, 0), (1.2, 0), (2.5, 4), (3.1, 4), (5.0, 4), (6.4, 4), (7.0, 0)])
    last = v.no_leak(gauges=[("prefill", "inflight")], within_s=3.5, since=v.Since.LAST_FAULT)
    assert status(last, h) is v.Status.FAIL and "stayed above its baseline 0 (max 4" in last(h).message
    assert (
        status(v.no_leak(gauges=[("prefill", "inflight")], within_s=4.5, since=v.Since.LAST_FAULT), h) is v.Status.PASS
    )


def test_no_leak_without_a_sample_before_the_fault_is_unknown():
    h = History()
    fault(h, 1.0, 2.0)
    series(h, "decode", "num_decode_transfer_queue_reqs", [(1.5, 3.0), (2.5, 0.0), (3.0, 0.0)])
    check = v.no_leak(gauges=[("decode", "num_decode_transfer_queue_reqs")], within_s=2.0)
    assert status(check, h) is v.Status.UNKNOWN and "no sample before the fault" in check(h).message


def test_each_gauge_is_judged_whatever_the_one_before_it_lacked():
    """A gauge with no sample before the fault leaves the verdict blind there, not on the
    gauges after it: a leak of the next one still fails."""
    h = History()
    fault(h, 1.0, 2.0)
    series(h, "decode", "num_used_tokens", [(1.5, 9.0), (3.0, 9.0)])  # no baseline
    series(h, "decode", "num_running_reqs", [(0.5, 0.0), (1.5, 2.0), (3.0, 2.0)])
    found = v.no_leak(gauges=[("decode", "num_used_tokens"), ("decode", "num_running_reqs")], within_s=2.0)(h)
    assert found.status is v.Status.FAIL and found.evidence.values["held"] == ["decode:num_running_reqs"]


def test_a_fault_never_healed_leaves_the_leak_unknown():
    h = History()
    h.append(FaultEvent(1.0, 0.0, "kill#1", Stage.INJECT, "SIGKILL decode"))
    series(h, "decode", "num_running_reqs", [(0.5, 0.0), (3.0, 0.0)])
    assert v.no_leak(gauges=[("decode", "num_running_reqs")], within_s=2.0)(h).status is v.Status.UNKNOWN


def test_every_count_of_every_engine_is_held_to_its_twin():
    """A count read on one page only says nothing; the counts after it are still judged,
    and each disagreement keeps its kind (one stale, one unread)."""
    h = History()
    for t, (used, said_used), (queue, said_queue) in (
        (0.0, (0, 0), (0, 0)),
        (1.0, (5, 5), (3, 0)),
        (1.1, (5, 5), (3, 0)),
        (1.2, (5, 5), (3, 0)),
        (2.0, (5, 9), (0, 0)),
        (2.1, (5, 9), (0, 0)),
    ):
        live: dict[str, float] = {
            "num_running_reqs": 1.0,
            "num_used_tokens": used,
            "num_decode_transfer_queue_reqs": queue,
        }
        said: dict[str, float] = {"num_used_tokens": said_used, "num_decode_transfer_queue_reqs": said_queue}
        h.append(Sample(t, "decode", merged([said, live])))  # num_running_reqs on /v1/loads alone
    found = v.sources_agree(engines=["decode"])(h)
    assert found.evidence.values["figures"] == ["decode:num_decode_transfer_queue_reqs", "decode:num_used_tokens"]
    assert found.evidence.values["kinds"] == ["stale", "unread"]


def test_a_count_that_moves_near_a_reading_puts_it_at_stake():
    """Zeros on both pages say nothing unless the count was above 0 near them."""
    h = History()
    _pages(h, "decode", "num_decode_transfer_queue_reqs", [(0.0, 0, 0), (0.1, 1, 1), (2.0, 0, 0)])
    found = v.sources_agree(engines=["decode"])(h)
    assert found.status is v.Status.PASS and found.evidence.values["at_stake"] == 2


def test_a_page_read_alone_is_no_reading_of_both():
    h = History()
    h.append(Sample(0.0, "decode", {"num_used_tokens@metrics": 4.0}))
    h.append(Sample(0.1, "decode", {"num_used_tokens@metrics": 4.0}))
    assert v.sources_agree(engines=["decode"])(h).status is v.Status.UNKNOWN


def test_the_first_reading_has_no_bracket_to_agree_within():
    """The first sample's /metrics was read before any /v1/loads: only an equal live value
    within the window matches it, never the last sample's."""
    h = History()
    _pages(h, "decode", "num_used_tokens", [(0.0, 0, 7), (0.1, 0, 7), (1.0, 7, 7)])
    assert v.sources_agree(engines=["decode"])(h).status is v.Status.FAIL


def test_a_gauge_silent_in_the_window_leaves_the_next_one_judged():
    h = History()
    fault(h, 1.0, 2.0)
    series(h, "decode", "num_used_tokens", [(0.5, 0.0)])  # no sample in the window
    series(h, "decode", "num_running_reqs", [(0.5, 0.0), (1.5, 2.0), (3.0, 2.0)])
    found = v.no_leak(gauges=[("decode", "num_used_tokens"), ("decode", "num_running_reqs")], within_s=2.0)(h)
    assert found.status is v.Status.FAIL and found.evidence.values["held"] == ["decode:num_running_reqs"]


def test_a_count_that_agrees_leaves_the_next_one_judged():
    h = History()
    for t, queue in ((0.0, 0), (1.0, 3), (1.1, 3), (1.2, 3), (2.0, 0)):
        live = {"num_used_tokens": 5.0, "num_decode_transfer_queue_reqs": float(queue)}
        h.append(Sample(t, "decode", merged([{"num_used_tokens": 5.0, "num_decode_transfer_queue_reqs": 0.0}, live])))
    found = v.sources_agree(engines=["decode"])(h)
    assert found.status is v.Status.FAIL and found.evidence.values["figures"] == [
        "decode:num_decode_transfer_queue_reqs"
    ]


def test_an_engine_with_no_counts_of_its_own_gives_no_reading():
    assert v.sources_agree(engines=["router"])(History()).status is v.Status.UNKNOWN


def test_a_gauge_not_yet_risen_when_its_window_opens_is_not_back():
    """A room that enters prefill's inflight queue just after decode froze reads 0 at the
    window's first sample, then 1 for good: the 0 was before anything was taken, not a
    release (CI of 2026-12-06 passed this as 'back to 0 at +0.04s')."""
    h = History()
    fault(h, 1.0, 12.0)
    series(h, "prefill", "num_prefill_inflight_queue_reqs", [(0.5, 0.0), (1.04, 0.0), (1.3, 1.0), (9.0, 1.0)])
    found = v.no_leak(gauges=[("prefill", "num_prefill_inflight_queue_reqs")], within_s=8.0, since=v.Since.FAULT)(h)
    assert found.status is v.Status.FAIL
    assert found.evidence.values["held"] == ["prefill:num_prefill_inflight_queue_reqs"]


def test_a_gauge_that_never_rose_held_nothing_at_stake():
    h = History()
    fault(h, 1.0, 3.0)
    series(h, "decode", "num_running_reqs", [(0.5, 0.0), (2.0, 0.0), (4.0, 0.0)])
    found = v.no_leak(gauges=[("decode", "num_running_reqs")], within_s=2.0)(h)
    assert found.status is v.Status.NOT_AT_STAKE
    assert "never rose" in found.message
