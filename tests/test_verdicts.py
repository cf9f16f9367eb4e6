"""Each verdict passes on a good history and fails (or is unknown) on a crafted bad one.

Histories are written by hand: verdicts are pure functions of the history.
"""

from __future__ import annotations

from typing import Callable, cast

import pytest

from chaos import verdicts as v
from chaos.clients.client import asked_of
from chaos.judge.backstops import backstop_of
from chaos.observe.growth import CHECKPOINT, Limit
from chaos.observe.history import (
    Chunk,
    Complete,
    FaultEvent,
    History,
    Invoke,
    LogEvent,
    Outcome,
    Phase,
    Sample,
    Stage,
    TriggerFired,
    VerdictRecord,
)
from chaos.observe.logs import parse_engine_line
from chaos.observe.pipeline import Metric
from chaos.observe.sampler import HEALTH, merged
from chaos.system.tools import REPO_ROOT
from suites.test_circuit_breaker import statuses_in
from suites.test_decode_radix_cache import conversations_finish, prefix_reused
from suites.test_neighbour_stall import stream_gaps_at_most
from suites.test_overload import gauge_reached, queued_for, refused_within, served_or_refused
from suites.test_proxy_wedge import stuck_before_router
from suites.test_retry_amplification import amplification_at_most, requests_retried
from suites.test_soak import does_not_grow


def op(
    h: History,
    name: str,
    t0: float,
    t1: float | None,
    outcome: Outcome = Outcome.OK,
    *,
    reply: str = "r",
    context: str = "",
    phase: str = "",
    agent: str = "",
    rnd: int = -1,
    prompt: int | None = None,
    error: str = "",
) -> None:
    h.append(Invoke(t0, 0.0, name, "/v1/chat/completions", True, agent, rnd, context, Phase(phase)))
    if t1 is not None:
        h.append(Complete(t1, 0.0, name, outcome, 200 if outcome is Outcome.OK else 500, error, reply, prompt, 2))


def fault(h: History, inject: float, heal: float) -> None:
    h.append(FaultEvent(inject, 0.0, "kill#1", Stage.INJECT, "SIGKILL decode"))
    h.append(FaultEvent(heal, 0.0, "kill#1", Stage.HEALED, "SIGKILL decode"))


def series(h: History, source: str, metric: str, points: list[tuple[float, float]]) -> None:
    for t, value in points:
        h.append(Sample(t, source, {metric: value}))


def status(check, h: History) -> v.Status:
    return check(h).status


def test_every_request_terminal():
    good, slow, hung = History(), History(), History()
    op(good, "a", 0, 1.0)
    op(slow, "a", 0, 9.0)
    op(hung, "a", 0, None)
    check = v.every_request_terminal(within_s=5)
    assert status(check, good) is v.Status.PASS
    assert status(check, slow) is v.Status.FAIL and "took 9.00s" in check(slow).message
    assert status(check, hung) is v.Status.FAIL and "never completed" in check(hung).message
    assert status(check, History()) is v.Status.NOT_AT_STAKE


@pytest.mark.parametrize("bad", [Outcome.TRUNCATED, Outcome.STALLED, Outcome.CLIENT_TIMEOUT, Outcome.CONNECTION_ERROR])
def test_failed_requests_are_clean(bad):
    good, unclean, late = History(), History(), History()
    for h in (good, unclean, late):
        fault(h, 1.0, 2.0)
    op(good, "a", 0, 1.5, Outcome.CLEAN_ERROR)
    op(unclean, "a", 0, 1.5, bad)
    op(late, "a", 0, 9.0, Outcome.CLEAN_ERROR)
    check = v.failed_requests_are_clean(within_s=3)
    assert status(check, good) is v.Status.PASS
    assert status(check, unclean) is v.Status.FAIL and bad.value in check(unclean).message
    assert status(check, late) is v.Status.FAIL
    probed = History()
    fault(probed, 1.0, 2.0)
    op(probed, "p", 2.1, 7.1, bad, phase="probe")  # the rig's own short patience: recovers judges it
    assert status(v.failed_requests_are_clean(), probed) is v.Status.NOT_AT_STAKE  # the probe alone: nothing judged
    assert status(v.failed_requests_are_clean(phase=Phase.PROBE), probed) is v.Status.FAIL  # asked for


def test_a_stream_its_client_hung_up_on_is_not_a_failure():
    h = History()
    fault(h, 1.0, 2.0)
    op(h, "a", 0, 1.5, Outcome.HUNG_UP)
    op(h, "b", 0, 1.5, Outcome.CLEAN_ERROR)
    judged = v.failed_requests_are_clean()(h)
    assert judged.status is v.Status.PASS and judged.evidence.values["failures"] == 1


def test_watchdog_fired():
    check = v.watchdog_fired("inflight", Metric("prefill", "fails"), timeout_s=4, slack_s=1)
    on_time, never, early = History(), History(), History()
    for h, rise in ((on_time, 5.3), (never, None), (early, 2.0)):
        fault(h, 1.0, 1.5)
        pts = [(t / 10, 0.0) for t in range(0, 90)]
        if rise is not None:
            pts = [(t, 1.0 if t >= rise else 0.0) for t, _ in pts]
        series(h, "prefill", "fails", pts)
    assert status(check, on_time) is v.Status.PASS
    assert status(check, never) is v.Status.FAIL and "never" in check(never).message
    assert status(check, early) is v.Status.FAIL and "+1.00s" in check(early).message
    short = History()
    fault(short, 1.0, 1.5)
    series(short, "prefill", "fails", [(0.5, 0.0), (2.0, 0.0)])
    assert status(check, short) is v.Status.UNKNOWN  # samples stop before the window closes


def test_a_watchdog_that_fired_early_fails_whatever_came_after():
    """Seen on an engine whose decode waiting timeout fired at 3 s instead of 6: the rise at
    +3.12 s is a definite failure, though the samples ended at +3.31 s, before the window
    [6 s, 7.5 s] closed, and though a later rise would have fallen inside it."""
    check = v.watchdog_fired("decode waiting", Metric("decode", "fails"), timeout_s=6, slack_s=1.5)
    cut_short, then_on_time = History(), History()
    for h, rises, end in ((cut_short, (4.12,), 4.31), (then_on_time, (4.12, 7.5), 12.0)):
        fault(h, 1.0, 1.2)
        series(
            h,
            "decode",
            "fails",
            [(t / 100, float(sum(t / 100 >= r for r in rises))) for t in range(0, int(end * 100) + 1, 10)]
            + [(end, float(len(rises)))],
        )
    for h in (cut_short, then_on_time):
        verdict = check(h)
        assert (
            verdict.status is v.Status.FAIL
            and "fired early" in verdict.message
            and "3.20s after the fault" in verdict.message
        ), verdict


def test_watchdog_fired_after_a_slow_heal_counts_from_when_the_heal_began():
    """A thaw through a deployment's commands took 1.3 s: the service resumed somewhere in
    between, so a watchdog that fired T after the heal began is on time, and one that fired
    before that is early."""
    check = v.watchdog_fired("inflight", Metric("prefill", "fails"), timeout_s=10, slack_s=3.5, since=v.Since.HEAL)
    on_time, early = History(), History()
    for h, rise in ((on_time, 35.8), (early, 35.0)):
        h.append(FaultEvent(12.0, 0.0, "freeze#1", Stage.INJECT, "freeze prefill"))
        h.append(FaultEvent(25.7, 0.0, "freeze#1", Stage.HEAL, "freeze prefill"))
        h.append(FaultEvent(27.0, 0.0, "freeze#1", Stage.HEALED, "freeze prefill"))
        series(h, "prefill", "fails", [(t / 10, 1.0 if t / 10 >= rise else 0.0) for t in range(0, 420)])
    assert status(check, on_time) is v.Status.PASS and "it took 1.30s" in check(on_time).message
    assert status(check, early) is v.Status.FAIL and "+9.30s" in check(early).message


def test_watchdog_fired_per_request_counts_from_the_first_request_into_the_fault():
    """SGLang's bootstrap timeout starts when a request reaches prefill: on a slow machine
    the first request went out 1.1 s after the blackhole and the counter rose 4.63 s after
    the fault, 3.53 s after that request, inside the window [3, 4.5] counted from it. A rise earlier than
    T after the first request cannot be that request's watchdog; before any request the
    verdict has nothing to count from."""
    check = v.watchdog_fired("bootstrap", Metric("prefill", "fails"), timeout_s=3, slack_s=1.5, since=v.Since.REQUEST)
    on_time, early, idle = History(), History(), History()
    for h, rise in ((on_time, 5.6), (early, 4.0), (idle, 5.6)):
        fault(h, 1.0, 8.0)
        op(h, "before", 0.2, 0.5)  # the baseline's, before the fault: not the clock's start
        if h is not idle:
            op(h, "a", 2.1, 5.7, Outcome.CLEAN_ERROR)
        series(h, "prefill", "fails", [(t / 10, 1.0 if t / 10 >= rise else 0.0) for t in range(0, 100)])
    assert (
        status(check, on_time) is v.Status.PASS
        and "3.50s after the first request into the fault" in check(on_time).message
    )
    assert status(check, early) is v.Status.FAIL and "+1.90s" in check(early).message
    assert status(check, idle) is v.Status.UNKNOWN


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
    second. A /metrics reading that repeats an older live value is stale (SGLang's /metrics,
    refreshed per logged batch); one /v1/loads never showed is unread: one page lies."""
    check = v.sources_agree(engines=["decode"])
    name = "num_decode_transfer_queue_reqs"
    agree, stale, lie, idle = History(), History(), History(), History()
    _pages(agree, "decode", name, [(0.0, 0, 0), (0.1, 3, 0), (0.2, 3, 3), (0.3, 0, 3), (0.4, 0, 0)])
    _pages(stale, "decode", name, [(0.0, 0, 0), (0.1, 3, 0), (1.0, 3, 0), (2.0, 0, 0)])
    _pages(lie, "decode", name, [(0.0, 0, 0), (0.1, 0, 3), (1.0, 0, 3), (2.0, 0, 0)])
    _pages(idle, "decode", name, [(0.0, 0, 0), (1.0, 0, 0)])
    assert check(agree).status is v.Status.PASS and check(agree).evidence.values["readings"] == 5
    held = check(stale)
    assert held.status is v.Status.FAIL and held.evidence.values["kinds"] == ["stale"]
    assert held.evidence.values["disagreed"] == {f"decode:{name}": 1}  # 0 at 1.0s: live read 3 all around
    assert held.evidence.values["figures"] == [f"decode:{name}"]  # what a known issue's evidence names
    lied = check(lie)
    assert lied.status is v.Status.FAIL and lied.evidence.values["kinds"] == ["unread"]
    assert check(idle).status is v.Status.NOT_AT_STAKE
    assert check(History()).status is v.Status.UNKNOWN


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


def test_recovers():
    check = v.recovers(within_s=5)
    good, never, nothing = History(), History(), History()
    for h in (good, never, nothing):
        fault(h, 1.0, 2.0)
    op(good, "p", 3.0, 3.5)
    op(never, "p", 3.0, 3.5, Outcome.CLEAN_ERROR)
    op(never, "q", 8.0, 9.0)
    assert status(check, good) is v.Status.PASS
    assert status(check, never) is v.Status.FAIL
    assert status(check, nothing) is v.Status.UNKNOWN


def test_recovers_after_each_heal():
    """Each heal is judged on the requests sent between it and the next fault: a first heal
    never recovered from fails even though the last one recovered; a heal with nothing sent
    before the next fault is unknown."""
    check = v.recovers_after_each_heal(within_s=5)
    good, first_lost, silent = History(), History(), History()
    for h in (good, first_lost, silent):
        fault(h, 1.0, 2.0)
        fault(h, 20.0, 21.0)
        op(h, "last", 22.0, 22.5)
    op(good, "p", 3.0, 3.5)
    op(first_lost, "p", 3.0, 3.5, Outcome.CLEAN_ERROR)
    op(first_lost, "q", 10.0, 10.5)  # a success, but 8.5 s after its heal
    assert status(check, good) is v.Status.PASS
    assert status(check, first_lost) is v.Status.FAIL and "1 heal(s)" in check(first_lost).message
    assert status(v.recovers(within_s=5), first_lost) is v.Status.PASS  # the last heal alone hides it
    assert status(check, silent) is v.Status.UNKNOWN
    assert status(check, History()) is v.Status.UNKNOWN


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


def test_recovers_from_when_a_held_engine_answers_again():
    """With ``ready``, the clock starts at the watched engine's first 200 after the heal; an
    engine never back leaves it at the heal, and an engine never watched is unknown."""
    check = v.recovers(within_s=5, ready=("prefill",))
    caught_up, never_back, unwatched = History(), History(), History()
    for h in (caught_up, never_back, unwatched):
        fault(h, 1.0, 2.0)
        op(h, "q", 3.0, 14.0)  # 12 s after the heal
    series(caught_up, HEALTH, "prefill", [(1.5, 0.0), (2.5, 0.0), (10.0, 1.0)])  # back 8 s after the heal
    series(never_back, HEALTH, "prefill", [(1.5, 0.0), (2.5, 0.0), (10.0, 0.0)])
    series(unwatched, HEALTH, "decode", [(10.0, 1.0)])
    assert status(check, caught_up) is v.Status.PASS and "(8.00s after the heal)" in check(caught_up).message
    assert status(check, never_back) is v.Status.FAIL and "never answered 200" in check(never_back).message
    assert status(check, unwatched) is v.Status.UNKNOWN
    assert status(v.recovers(within_s=5), caught_up) is v.Status.FAIL  # from the heal itself: 12 s


def test_replies_match_baseline():
    check = v.replies_match_baseline()
    good, wrong, none = History(), History(), History()
    for h in (good, wrong):
        op(h, "b", 0, 1, reply="amber basil", context="c1", phase="baseline")
    op(good, "f", 2, 3, reply="amber basil", context="c1", phase="fault")
    op(wrong, "f", 2, 3, reply="cedar delta", context="c1", phase="fault")
    op(none, "f", 2, 3, reply="x", context="c9", phase="fault")
    assert status(check, good) is v.Status.PASS
    assert status(check, wrong) is v.Status.FAIL and "cedar delta" in check(wrong).message
    assert status(check, none) is v.Status.UNKNOWN


def test_context_grows():
    check = v.context_grows()
    good, shrunk = History(), History()
    for h, tokens in ((good, (100, 200, 300)), (shrunk, (100, 200, 150))):
        for rnd, n in enumerate(tokens):
            op(h, f"o{rnd}", rnd, rnd + 0.5, agent="agent0", rnd=rnd, prompt=n)
    assert status(check, good) is v.Status.PASS
    assert status(check, shrunk) is v.Status.FAIL and "prompt_tokens 150 after 200" in check(shrunk).message


def test_two_conversations_in_one_phase_each_have_their_own_agent0():
    """Found by `make explore` (seed 1, episode 2): two conversations sent one after the
    other, in one phase, were judged as one agent0 whose context shrank."""
    h = History()
    for conversation in ("conversations#1", "conversations#2"):
        for rnd, n in enumerate((52, 159)):
            name = f"{conversation}/{rnd}"
            h.append(Invoke(rnd, 0.0, name, "/v1/chat/completions", True, "agent0", rnd, "", Phase.FAULT, conversation))
            h.append(Complete(rnd + 0.5, 0.0, name, Outcome.OK, 200, "", "r", n, 2))
    judged = v.context_grows()(h)
    assert judged.status is v.Status.PASS and judged.evidence.values["conversations"] == 2, judged.message


def test_expect_raises_on_fail_and_unknown_and_names_the_verdict():
    h = History()
    op(h, "a", 0, None)
    with pytest.raises(v.VerdictFailed, match=r"\[FAIL\] every_request_terminal"):
        v.expect(h, v.every_request_terminal(within_s=1))
    with pytest.raises(v.VerdictFailed, match=r"\[UNKNOWN\] recovers"):
        v.expect(h, v.recovers(within_s=1))


def test_a_verdict_that_raises_is_unknown_and_a_premise_unmet():
    @v.verdict(lambda **_: "broken")
    def broken(_: History) -> v.Finding:
        raise KeyError("boom")

    @v.premise(lambda **_: "broken_premise")
    def broken_premise(_: History) -> v.Finding:
        raise KeyError("boom")

    verdict, premise = v.evaluate(History(), [broken(), broken_premise()])
    assert verdict.status is v.Status.UNKNOWN and "KeyError" in verdict.message
    assert premise.status is v.Status.UNMET and premise.role is v.Role.PREMISE


def test_judge_takes_verdicts_and_require_takes_premises():
    from chaos.errors import PremiseNotMet

    h = History()
    op(h, "a", 0, 1, Outcome.OK, phase="fault")
    with pytest.raises(TypeError, match="require takes premises"):
        v.require(h, v.recovers(within_s=1))
    with pytest.raises(PremiseNotMet, match=r"\[UNMET\] requests_affected\(fault\)"):
        v.require(h, v.requests_affected(phase=Phase.FAULT, why="the fault came late"))
    [record] = list(h.of(VerdictRecord))
    assert (record.check, record.role, record.status) == ("requests_affected", "premise", "unmet")
    assert record.evidence["values"]["requests"] == 1 and record.evidence["ops"] == ["a"]


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


def test_history_round_trips_through_jsonl(tmp_path):
    h = History(path=tmp_path / "h.jsonl")
    fault(h, 1.0, 2.0)
    op(h, "a", 0, 1, Outcome.CLEAN_ERROR, error="boom")
    series(h, "decode", "running", [(0.1, 3.0)])
    h.close()
    loaded = History.load(tmp_path / "h.jsonl")
    assert loaded.records == h.records


def _charges(h: History, t: float, prefill: float, decode: float) -> None:
    """One smg sample: the failures charged to each worker's breaker (decode's series listed,
    its failure series created at its first failure, as smg does)."""
    values = {"smg_worker_cb_outcomes_total:P": 5.0 + prefill, "smg_worker_cb_outcomes_total:D": 5.0 + decode}
    values |= {f"smg_worker_cb_outcomes_total:{w}:failure": n for w, n in (("P", prefill), ("D", decode)) if n}
    h.append(Sample(t, "router", values))


def test_charged_only_where_struck():
    check = v.charged_only_where_struck({"prefill": "P", "decode": "D"})
    fair, unfair, client, restarted = History(), History(), History(), History()
    for h in (fair, unfair, restarted):
        fault(h, 1.0, 2.0)  # SIGKILL decode: it strikes decode only
        h.append(FaultEvent(1.0, 0.0, "kill#1", Stage.INJECT, "SIGKILL decode", implicates=("decode",)))
    for t, d in ((0.5, 0), (1.5, 3), (2.5, 3)):
        _charges(fair, t, 0, d)
        _charges(unfair, t, d, d)
    client.append(FaultEvent(1.0, 0.0, "client#1", Stage.INJECT, "bad requests"))
    for t, n in ((0.5, 0), (1.5, 1)):
        _charges(client, t, n, 0)
    for t, p in ((0.5, 4), (1.5, 0), (2.5, 2)):  # smg restarted: its counters begin again
        _charges(restarted, t, p, 0)
    assert status(check, fair) is v.Status.PASS and "decode 3 (struck)" in check(fair).message
    assert status(check, unfair) is v.Status.FAIL and "3 failure(s) to prefill's breaker" in check(unfair).message
    assert status(check, client) is v.Status.FAIL and "no engine" in check(client).message
    assert status(check, restarted) is v.Status.FAIL and "2 failure(s) to prefill's" in check(restarted).message
    assert status(check, History()) is v.Status.UNKNOWN


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


def test_counter_never_rises():
    check = v.counter_never_rises(Metric("decode", "fails"))
    flat, rose, idle = History(), History(), History()
    series(flat, "decode", "fails", [(0.1, 2), (0.2, 2)])
    series(rose, "decode", "fails", [(0.1, 2), (0.2, 3)])
    series(idle, "decode", "fails", [(0.1, 2), (0.2, 2)])
    op(flat, "a", 0.15, 0.3)  # a request it could have failed
    assert status(check, flat) is v.Status.PASS
    assert status(check, rose) is v.Status.FAIL
    assert status(check, idle) is v.Status.NOT_AT_STAKE  # flat, with no request to fail


def test_outcomes_in():
    check = v.outcomes_in({Outcome.TRUNCATED, Outcome.CLIENT_TIMEOUT})
    good, bad = History(), History()
    op(good, "a", 0, 1, Outcome.TRUNCATED)
    op(bad, "a", 0, 1, Outcome.STALLED)
    assert status(check, good) is v.Status.PASS
    assert status(check, bad) is v.Status.FAIL and "stalled" in check(bad).message


def test_stuck_before_router():
    check = stuck_before_router(router_counter="reqs")
    before, after = History(), History()
    for h, inside in ((before, 10), (after, 12)):
        fault(h, 1.0, 3.0)
        op(h, "a", 1.5, 2.5, Outcome.CLIENT_TIMEOUT)
        series(h, "router", "reqs", [(0.5, 9), (1.3, 10), (2.0, inside), (2.9, inside)])
    assert status(check, before) is v.Status.PASS
    assert status(check, after) is v.Status.FAIL


def test_a_premise_that_did_not_hold_is_neither_pass_nor_fail():
    """requests_affected: a fault that reached no request tested nothing; require() raises
    PremiseNotMet (a rig error), never VerdictFailed, and records the premise."""
    from chaos.errors import PremiseNotMet

    h = History()
    op(h, "op1", 0.0, 0.5, phase="fault")
    with pytest.raises(PremiseNotMet, match="came too late"):
        v.require(h, v.requests_affected(phase=Phase.FAULT, why="test"))
    op(h, "op2", 1.0, 1.5, Outcome.CLEAN_ERROR, phase="fault", error="boom")
    v.require(h, v.requests_affected(phase=Phase.FAULT, why="test"))  # one request met the fault


def test_a_counter_created_at_its_first_increment_rises_from_zero():
    """SGLang has no series for a failure counter until its first .inc(): an answered scrape
    without it reads 0; with no scrape answered, nothing is known."""
    h = History()
    fault(h, 1.0, 1.5)
    for t in (0.5, 1.0, 2.0, 3.0):
        h.append(Sample(t, "prefill", {"num_running_reqs": 0.0}))
    h.append(Sample(4.1, "prefill", {"num_running_reqs": 0.0, "num_bootstrap_failed_reqs_total": 1.0}))
    h.append(Sample(6.0, "prefill", {"num_running_reqs": 0.0, "num_bootstrap_failed_reqs_total": 1.0}))
    fired = v.watchdog_fired(
        "bootstrap", Metric("prefill", "num_bootstrap_failed_reqs_total"), timeout_s=3.0, slack_s=1.5
    )
    assert status(fired, h) is v.Status.PASS
    assert status(v.counter_never_rises(Metric("prefill", "num_bootstrap_failed_reqs_total")), h) is v.Status.FAIL
    never = History()  # the engine answered every scrape and never created the counter: no failure
    fault(never, 1.0, 1.5)
    op(never, "a", 1.0, 2.0, Outcome.CLEAN_ERROR)
    for t in (0.5, 2.0, 9.0):
        never.append(Sample(t, "prefill", {"num_running_reqs": 0.0}))
    assert (
        status(fired, never) is v.Status.FAIL
        and status(v.counter_never_rises(Metric("prefill", "num_bootstrap_failed_reqs_total")), never) is v.Status.PASS
    )
    other = v.counter_never_rises(Metric("prefill", "some_other_counter_total"))  # not known to be created lazily
    assert status(other, never) is v.Status.UNKNOWN
    silent = History()  # the engine never answered: nothing is known
    fault(silent, 1.0, 1.5)
    assert status(fired, silent) is v.Status.UNKNOWN


def test_no_leak_without_a_sample_before_the_fault_is_unknown():
    h = History()
    fault(h, 1.0, 2.0)
    series(h, "decode", "num_decode_transfer_queue_reqs", [(1.5, 3.0), (2.5, 0.0), (3.0, 0.0)])
    check = v.no_leak(gauges=[("decode", "num_decode_transfer_queue_reqs")], within_s=2.0)
    assert status(check, h) is v.Status.UNKNOWN and "no sample before the fault" in check(h).message


def test_statuses_in():
    refused, charged = History(), History()
    for h, status_code in ((refused, 400), (charged, 500)):
        h.append(Invoke(0.0, 0.0, "a", "/v1/chat/completions", False, phase=Phase.FAULT))
        h.append(Complete(0.5, 0.0, "a", Outcome.CLEAN_ERROR, status_code, "too long"))
    check = statuses_in(range(400, 500), phase=Phase.FAULT, why="the client's error")
    assert status(check, refused) is v.Status.PASS
    assert status(check, charged) is v.Status.FAIL and "got 500" in check(charged).message
    assert status(check, History()) is v.Status.NOT_AT_STAKE


def test_stream_gaps_at_most():
    flowing, stalled = History(), History()
    for h, gap in ((flowing, 0.1), (stalled, 3.0)):
        op(h, "s", 0.0, 5.0, phase="fault")
        for t in (1.0, 1.1, 1.1 + gap, 1.2 + gap):
            h.append(Chunk(t, "s", 10))
    check = stream_gaps_at_most(1.5, phase=Phase.FAULT, why="test")
    assert status(check, flowing) is v.Status.PASS
    assert status(check, stalled) is v.Status.FAIL and "3.00s without a chunk" in check(stalled).message
    assert status(check, History()) is v.Status.NOT_AT_STAKE


def test_ended_as_is_a_premise():
    abandoned, refused = History(), History()
    op(abandoned, "a", 0, 1.0, Outcome.CLIENT_TIMEOUT, phase="fault")
    op(refused, "a", 0, 0.1, Outcome.CLEAN_ERROR, phase="fault", error="503 model not found")
    check = v.ended_as(Outcome.CLIENT_TIMEOUT, phase=Phase.FAULT, why="in flight when abandoned")
    assert status(check, abandoned) is v.Status.PASS
    assert (
        status(check, refused) is v.Status.UNMET and "503 model not found" in check(refused).message
    )  # never a fail: nothing was tested


def test_a_wrong_reply_shows_where_it_leaves_its_baseline():
    h = History()
    op(h, "b", 0, 1, reply="amber basil cedar", context="c1", phase="baseline")
    op(h, "f", 2, 3, reply="amber basil delta", context="c1", phase="fault")
    message = v.replies_match_baseline()(h).message
    assert "differs from char 12 of 17: got 'delta', baseline 'cedar'" in message, message


def test_a_misspelt_phase_or_since_fails_at_once():
    with pytest.raises(ValueError):
        v.no_leak(gauges=[], within_s=1, since="heals")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        Invoke(0.0, 0.0, "a", "/p", False, phase="faults")  # type: ignore[arg-type]


def test_health_tells_truth():
    truthful, lying, unwatched = History(), History(), History()
    for h in (truthful, lying):
        fault(h, 1.0, 2.0)
        series(h, "health", "decode", [(0.5, 1.0), (1.5, 1.0), (2.5, 1.0)])
    op(truthful, "a", 3.0, 3.5, phase="after")
    op(lying, "a", 3.0, 3.5, Outcome.CLEAN_ERROR, phase="after", error="Lost connection with prefill instance")
    op(unwatched, "a", 3.0, 3.5, phase="after")
    check = v.health_tells_truth("decode", phase=Phase.AFTER)
    assert status(check, truthful) is v.Status.PASS and "said 200 in 1 of 1" in check(truthful).message
    assert status(check, lying) is v.Status.FAIL and "Lost connection" in check(lying).message
    assert status(check, unwatched) is v.Status.UNKNOWN


def test_a_request_that_failed_while_health_said_503_is_no_lie():
    h = History()
    series(h, "health", "decode", [(0.5, 1.0), (2.5, 0.0)])
    op(h, "a", 3.0, 3.5, Outcome.CLEAN_ERROR, phase="after")
    assert status(v.health_tells_truth("decode", phase=Phase.AFTER), h) is v.Status.PASS


def test_not_ready_before_gone():
    graceful, abrupt, unseen = History(), History(), History()
    for h in (graceful, abrupt, unseen):
        fault(h, 1.0, 9.0)
    h = graceful
    for t, values in ((0.5, {"decode": 1.0}), (1.5, {"decode": 0.0}), (3.0, {})):  # 200, then 503, then no answer
        h.append(Sample(t, "health", values))
    for t, values in ((0.5, {"decode": 1.0}), (1.5, {}), (2.0, {"decode": 0.0})):  # dark first: a 503 after is too late
        abrupt.append(Sample(t, "health", values))
    unseen.append(Sample(1.5, "health", {"decode": 1.0}))
    check = v.not_ready_before_gone("decode")
    assert status(check, graceful) is v.Status.PASS and "no answer from +2.00s" in check(graceful).message
    assert status(check, abrupt) is v.Status.FAIL and "never saying" in check(abrupt).message
    assert status(check, unseen) is v.Status.UNKNOWN


def test_open_at_fault_is_a_premise():
    met, missed = History(), History()
    for h in (met, missed):
        fault(h, 1.0, 2.0)
    op(met, "a", 0.5, 3.0, phase="fault")
    op(missed, "a", 0.1, 0.5, phase="fault")  # done before the SIGTERM
    check = v.open_at_fault(phase=Phase.FAULT, why="decode had them")
    assert status(check, met) is v.Status.PASS
    assert status(check, missed) is v.Status.UNMET and "not open at the fault" in check(missed).message


def _soak(points: list[tuple[float, float]], metric: str = "open_fds:decode") -> History:
    """A soak's history: one checkpoint after each reading of the process trees."""
    h = History()
    for t, value in points:
        h.append(Sample(t, "procs", {metric: value}))
        h.append(TriggerFired(t + 0.1, CHECKPOINT, "quiet"))
    return h


def test_does_not_grow():
    fds = Limit(Metric("procs", "open_fds:decode"), 8, unit=" fds")
    check = does_not_grow([fds])
    flat = _soak([(t, 14.0 + (t % 2)) for t in range(0, 40, 2)])  # noise, no trend
    leaking = _soak([(t, 14.0 + t) for t in range(0, 40, 2)])  # one descriptor a second
    short = _soak([(0, 14.0), (2, 14.0)])
    assert status(check, flat) is v.Status.PASS and "fds/h" in check(flat).message
    assert status(check, leaking) is v.Status.FAIL and "open_fds:decode +3.6e+03 fds/h" in check(leaking).message
    assert status(check, short) is v.Status.UNKNOWN


def test_growth_leaves_out_the_warm_up_and_allows_a_share_of_the_first_value():
    warming = _soak(
        [(0, 100.0), (2, 150.0), (4, 200.0), (6, 200.0), (8, 200.0), (10, 200.0), (12, 200.0), (14, 200.0)],
        "rss_bytes:router",
    )
    rss = Limit(Metric("procs", "rss_bytes:router"), 0, relative=0.05)
    assert status(does_not_grow([rss]), warming) is v.Status.PASS  # the first quarter is warm-up
    growing = _soak(
        [(t, 200.0 + 2 * t) for t in range(0, 16, 2)], "rss_bytes:router"
    )  # +20 over the window: 10% of 200
    assert status(does_not_grow([rss]), growing) is v.Status.FAIL
    assert (
        status(does_not_grow([Limit(Metric("procs", "rss_bytes:router"), 0, relative=0.2)]), growing) is v.Status.PASS
    )


def _received(h: History, op: str, *rids: str, service: str = "prefill") -> None:
    for rid in rids:
        line = f"2026-12-02 00:00:00.000 INFO {service} event=req rid={rid} state=received xrid={op}"
        h.append(LogEvent(1.0, service, line, op=op, fields=parse_engine_line(line)))


def test_amplification_at_most():
    within, over, unseen = History(), History(), History()
    for h in (within, over, unseen):
        op(h, "a", 0, 1.0, Outcome.CLEAN_ERROR, phase="fault")
        op(h, "b", 0, 1.0, Outcome.CLEAN_ERROR, phase="fault")
    _received(within, "a", "r1", "r2", "r3")
    _received(within, "b", "r4")
    _received(over, "a", *(f"r{i}" for i in range(7)))
    _received(unseen, "a", "d1", service="decode")
    check = amplification_at_most(5, phase=Phase.FAULT)
    assert (
        status(check, within) is v.Status.PASS
        and "amplification 2.00 mean, 3 worst over 2 requests (budget 5)" in check(within).message
    )
    assert status(check, over) is v.Status.FAIL and "a x7" in check(over).message
    assert status(check, unseen) is v.Status.UNKNOWN
    assert status(requests_retried(phase=Phase.FAULT, why="x"), within) is v.Status.PASS
    once = History()
    op(once, "a", 0, 1.0, phase="fault")
    _received(once, "a", "r1")
    assert status(requests_retried(phase=Phase.FAULT, why="x"), once) is v.Status.UNMET


def test_a_reading_that_caught_something_in_passing_is_no_growth():
    """SGLang's /metrics token count lags until decode logs its next batch: a checkpoint may
    read a spike. A leak raises the floor; a spike does not."""
    tokens = Limit(Metric("decode", "num_used_tokens"), 0)
    spiky = History()
    for t, value in enumerate([0, 0, 0, 0, 142, 0, 0, 0, 1131, 0, 0, 429]):
        spiky.append(Sample(float(t), "decode", {"num_used_tokens": float(value)}))
        spiky.append(TriggerFired(t + 0.1, CHECKPOINT, "quiet"))
    assert status(does_not_grow([tokens]), spiky) is v.Status.PASS


def _answered(h: History, name: str, t0: float, t1: float, code: int, outcome: Outcome) -> None:
    h.append(Invoke(t0, 0.0, name, "/v1/chat/completions", False, phase=Phase.FAULT))
    h.append(Complete(t1, 0.0, name, outcome, code, "" if code == 200 else "shed"))


def test_served_or_refused_and_refused_within():
    shed, failed, late = History(), History(), History()
    for h in (shed, failed, late):
        _answered(h, "a", 0.0, 2.0, 200, Outcome.OK)
    _answered(shed, "b", 0.0, 0.1, 429, Outcome.CLEAN_ERROR)
    _answered(failed, "b", 0.0, 0.1, 503, Outcome.CLEAN_ERROR)
    _answered(late, "b", 0.0, 9.0, 429, Outcome.CLEAN_ERROR)
    served = served_or_refused(429, phase=Phase.FAULT)
    assert status(served, shed) is v.Status.PASS and "1 served, 1 refused" in served(shed).message
    assert status(served, failed) is v.Status.FAIL and "got 503" in served(failed).message
    assert status(served, History()) is v.Status.NOT_AT_STAKE
    prompt = refused_within(429, 3.0, phase=Phase.FAULT)
    assert status(prompt, shed) is v.Status.PASS
    assert status(prompt, late) is v.Status.FAIL and "after 9.00s" in prompt(late).message
    assert status(prompt, failed) is v.Status.NOT_AT_STAKE  # nothing was refused with 429: nothing to judge


def test_queued_for_and_gauge_reached():
    queue = Metric("decode", "prealloc")
    held, broken = History(), History()
    series(held, "decode", "prealloc", [(0.0, 0), (1.0, 3), (3.0, 5), (6.0, 1), (6.5, 0)])
    series(
        broken, "decode", "prealloc", [(0.0, 0), (1.0, 3), (3.0, 0), (4.0, 5), (6.5, 0)]
    )  # single samples, a break between
    check = queued_for(queue, 4.5, why="no overload")
    assert status(check, held) is v.Status.PASS and "5.00s" in check(held).message
    assert status(check, broken) is v.Status.UNMET and "0.00s at most" in check(broken).message
    assert status(check, History()) is v.Status.UNMET
    assert status(gauge_reached(queue, 5, why="full"), held) is v.Status.PASS
    assert status(gauge_reached(queue, 6, why="full"), held) is v.Status.UNMET


def test_prefix_reused_and_conversations_finish():
    h = History()
    for rnd, outcome in enumerate((Outcome.OK, Outcome.CLEAN_ERROR, Outcome.OK)):
        op(h, f"o{rnd}", rnd, rnd + 0.5, outcome, phase="fault", agent="agent0", rnd=min(rnd, 1))
    h.append(LogEvent(0.2, "decode", "", op="o0", fields={"rid": "r0", "state": "finished", "cached_tokens": "0"}))
    premise = prefix_reused("decode", phase=Phase.FAULT, why="cold")
    assert status(premise, h) is v.Status.UNMET
    h.append(LogEvent(2.2, "decode", "", op="o2", fields={"rid": "r2", "state": "finished", "cached_tokens": "40"}))
    assert status(premise, h) is v.Status.PASS and "up to 40 tokens" in premise(h).message
    assert status(conversations_finish(2, phase=Phase.FAULT), h) is v.Status.PASS  # round 1 answered on its retry
    short = conversations_finish(3, phase=Phase.FAULT)
    assert status(short, h) is v.Status.FAIL and "round(s) [2]" in short(h).message
    assert status(short, History()) is v.Status.NOT_AT_STAKE


def _doc_verdict() -> dict[str, object]:
    """The python block of docs/writing-a-suite.md's "Writing a new verdict", executed."""
    section = (REPO_ROOT / "docs" / "writing-a-suite.md").read_text().split("## Writing a new verdict", 1)[1]
    code = section.split("```python\n", 1)[1].split("```", 1)[0]
    namespace: dict[str, object] = {}
    exec(compile(code, "writing-a-suite.md", "exec"), namespace)
    return namespace


def test_the_documented_new_verdict_runs_and_judges():
    first_byte_within = cast(Callable[..., v.Check], _doc_verdict()["first_byte_within"])
    check = first_byte_within(1.0, phase=Phase.FAULT)
    quick, slow, none = History(), History(), History()
    for h, first in ((quick, 0.4), (slow, 2.5)):
        h.append(Invoke(0.0, 0.0, "a", "/v1/chat/completions", True, "", -1, "", Phase.FAULT))
        h.append(Complete(3.0, 0.0, "a", Outcome.OK, 200, "", "r", None, 2, first_byte_t=first))
    assert check.kind == "first_byte_within" and check.name == "first_byte_within(1s, fault)"
    assert status(check, quick) is v.Status.PASS
    judged = check(slow)
    assert judged.status is v.Status.FAIL and judged.evidence.ops == ("a",) and judged.evidence.values["worst_s"] == 2.5
    assert status(check, none) is v.Status.NOT_AT_STAKE


def _finished(h: History, name: str, *, asked: int, got: int, finish: str, ignore_eos: bool = True, stops=False):
    h.append(Invoke(0.0, 0.0, name, "/v1/chat/completions", True, max_tokens=asked, ignore_eos=ignore_eos, stops=stops))
    h.append(Complete(1.0, 0.0, name, Outcome.OK, 200, "", "text", 5, got, finish=finish))


@pytest.mark.parametrize(
    ("asked", "got", "finish", "ignore_eos", "stops", "truthful"),
    [
        (8, 8, "length", True, False, True),
        (8, 5, "length", True, False, False),  # cut short, and called "length"
        (8, 5, "stop", True, False, False),  # nothing could stop it
        (8, 5, "stop", False, False, True),  # the model's end of sequence may
        (8, 5, "stop", True, True, True),  # a stop string may
        (8, 9, "length", True, False, False),  # more than asked for
    ],
)
def test_finish_reasons_tell_the_truth(asked, got, finish, ignore_eos, stops, truthful):
    h = History()
    _finished(h, "a", asked=asked, got=got, finish=finish, ignore_eos=ignore_eos, stops=stops)
    judged = v.finish_reasons_tell_the_truth()(h)
    assert judged.status is (v.Status.PASS if truthful else v.Status.FAIL), judged.message


def test_finish_reasons_unjudged_without_token_counts_are_unknown_not_passed():
    h = History()
    op(h, "a", 0, 1.0)  # no max_tokens recorded
    assert v.finish_reasons_tell_the_truth()(h).status is v.Status.UNKNOWN
    assert v.finish_reasons_tell_the_truth()(History()).status is v.Status.UNKNOWN


def test_what_a_request_asked_of_its_end_is_read_from_each_endpoints_body():
    assert asked_of({"max_tokens": 8, "ignore_eos": True}) == dict(max_tokens=8, ignore_eos=True, stops=False)
    assert asked_of({"max_completion_tokens": 4, "stop": ["\n"]})["stops"] is True
    native = {"text": "hi", "sampling_params": {"max_new_tokens": 16, "stop_token_ids": [2]}}
    assert asked_of(native) == dict(max_tokens=16, ignore_eos=False, stops=True)


@pytest.mark.parametrize(
    ("stream", "outcome", "status", "finish", "reply", "agrees"),
    [
        (False, Outcome.CLEAN_ERROR, 500, "", "", True),  # an error status: the body's error agrees
        (False, Outcome.CLEAN_ERROR, 200, "", "", False),  # an error body under a 200
        (False, Outcome.CLEAN_ERROR, 200, "abort", "", True),  # SGLang's graceful abort says so
        (True, Outcome.CLEAN_ERROR, 200, "", "", True),  # a stream fails by an event after its 200
        (False, Outcome.OK, 200, "length", "", False),  # a success with no content, tokens counted
        (False, Outcome.OK, 200, "length", "text", True),
    ],
)
def test_status_agrees_with_body(stream, outcome, status, finish, reply, agrees):
    h = History()
    h.append(Invoke(0.0, 0.0, "a", "/v1/chat/completions", stream, max_tokens=2))
    h.append(
        Complete(
            1.0, 0.0, "a", outcome, status, "boom" if outcome is not Outcome.OK else "", reply, 5, 2, finish=finish
        )
    )
    judged = v.status_agrees_with_body()(h)
    assert judged.status is (v.Status.PASS if agrees else v.Status.FAIL), judged.message


def _streamed_through_a_kill(outcome: Outcome, last_chunk_t: float, action: str = "kill") -> History:
    """A stream begun at 0.2 s; decode SIGKILLed (or told to abort everything) at 1.0 s,
    verified gone (or the abort acknowledged) at 1.1 s."""
    h = History()
    h.append(FaultEvent(1.0, 0.0, "f#1", Stage.INJECT, f"{action} decode", implicates=("decode",), action=action))
    h.append(FaultEvent(1.1, 0.0, "f#1", Stage.VERIFIED, f"{action} decode", implicates=("decode",), action=action))
    h.append(Invoke(0.0, 0.0, "s", "/v1/chat/completions", True))
    t = 0.2
    while t <= last_chunk_t:
        h.append(Chunk(t, "s", 10))
        t += 0.1
    h.append(Complete(last_chunk_t + 0.01, 0.0, "s", outcome, 200, "", "text", 5, 8, first_byte_t=0.2))
    return h


@pytest.mark.parametrize(
    ("action", "outcome", "last_chunk_t", "hidden"),
    [
        ("kill", Outcome.OK, 3.0, True),  # bytes long after decode was gone, and a plain success
        ("kill", Outcome.CLEAN_ERROR, 3.0, False),  # smg told the client: nothing hidden
        ("kill", Outcome.OK, 1.2, False),  # the last bytes were already on their way
        ("abort_all", Outcome.OK, 3.0, True),  # decode acknowledged the abort, the stream went on to succeed
        ("abort_all", Outcome.OK, 2.0, False),  # within a scheduler pass of the acknowledgement
        ("abort_all", Outcome.CLEAN_ERROR, 3.0, False),  # ended with finish_reason abort
        ("freeze", Outcome.OK, 3.0, False),  # a frozen decode ends nothing: not at stake
    ],
)
def test_a_stream_decode_was_serving_does_not_outlive_its_kill(action, outcome, last_chunk_t, hidden):
    judged = v.no_hidden_fault(service="decode")(_streamed_through_a_kill(outcome, last_chunk_t, action))
    if action == "freeze":
        assert judged.status is v.Status.NOT_AT_STAKE
        return
    assert judged.status is (v.Status.FAIL if hidden else v.Status.PASS), judged.message


def test_no_hidden_fault_without_a_kill_is_not_at_stake():
    h = History()
    op(h, "a", 0, 1.0)
    assert v.no_hidden_fault(service="decode")(h).status is v.Status.NOT_AT_STAKE


@pytest.mark.parametrize(
    ("action", "outcome", "first_byte_t", "verdict"),
    [
        ("terminate", Outcome.OK, 0.2, v.Status.PASS),  # drained: the open stream finished
        ("terminate", Outcome.TRUNCATED, 0.2, v.Status.FAIL),  # cut by the SIGTERM
        ("terminate", Outcome.CLEAN_ERROR, 0.2, v.Status.FAIL),  # an error event is still a stream not drained
        ("terminate", Outcome.HUNG_UP, 0.2, v.Status.PASS),  # the client's own hang-up
        ("terminate", Outcome.CLEAN_ERROR, 1.5, v.Status.NOT_AT_STAKE),  # begun after the SIGTERM: may be refused
        ("kill", Outcome.TRUNCATED, 0.2, v.Status.NOT_AT_STAKE),  # a SIGKILL drains nothing: not judged
    ],
)
def test_a_stream_open_at_a_sigterm_finishes(action, outcome, first_byte_t, verdict):
    h = History()
    h.append(FaultEvent(1.0, 0.0, "f#1", Stage.INJECT, f"{action} decode", implicates=("decode",), action=action))
    h.append(FaultEvent(1.1, 0.0, "f#1", Stage.VERIFIED, f"{action} decode", implicates=("decode",), action=action))
    h.append(Invoke(0.0, 0.0, "s", "/v1/chat/completions", True))
    h.append(Complete(3.0, 0.0, "s", outcome, 200, "", "text", 5, 8, first_byte_t=first_byte_t))
    judged = v.sigterm_drains()(h)
    assert judged.status is verdict, judged.message


# A failed request's line as each engine writes it when a backstop released it (pdsim's
# logfmt; SGLang 0.5.23's Finish line, its finish_reason carrying the abort's message), and
# a release by the primary path (a decode abort relayed to prefill)
_PDSIM_WAITING = (
    "2026-12-04 14:42:15.986 INFO decode event=req ts=1796395335.986036 rid=e517 bootstrap_room=9069 state=failed "
    "status=500 error=\"Decode transfer failed for request rank=0 decode_req.req.rid='e517' "
    "decode_req.req.bootstrap_room=9069 with exception KVTransferError(bootstrap_room=9069): Request 9069 timed out "
    'after 6.0s in KVPoll.WaitingForInput"'
)
_SGLANG_BOOTSTRAP = (
    "[2026-12-04 15:48:50] Finish: obj=GenerateReqInput(rid='bc84', routing_key='a'), out={'meta_info': "
    "{'finish_reason': {'type': 'abort', 'message': \"Prefill bootstrap failed for request rank=0 "
    "req.rid='bc84' req.bootstrap_room=2016 with exception KVTransferError(bootstrap_room=2016): Request 2016 "
    "timed out after 3.0s in KVPoll.Bootstrapping\", 'status_code': 500, 'err_type': None}}}"
)
_PDSIM_INFLIGHT = (
    "2026-12-04 14:42:15.986 INFO prefill event=req ts=1796395335.986036 rid=f1 bootstrap_room=7 state=failed "
    'error="Prefill transfer failed ... Request 7 timed out after 4.0s in the prefill inflight queue"'
)
_PDSIM_ABORTED = (
    "2026-12-04 14:42:15.986 INFO prefill event=req ts=1796395335.986036 rid=f2 bootstrap_room=8 state=failed "
    'error="Prefill transfer failed ... with exception Aborted by AbortReq."'
)


@pytest.mark.parametrize(
    ("line", "released"),
    [
        (_PDSIM_WAITING, ("waiting timeout", 6.0)),
        (_SGLANG_BOOTSTRAP, ("bootstrap timeout", 3.0)),
        (_PDSIM_INFLIGHT, ("inflight watchdog", 4.0)),
        (_PDSIM_ABORTED, None),
    ],
)
def test_a_backstop_is_named_by_what_the_release_says(line, released):
    assert backstop_of(line) == released


def _released(lines: dict[str, tuple[str, str]]) -> History:
    h = History()
    for name, (service, line) in lines.items():
        op(h, name, 0, 2.0, Outcome.HUNG_UP)
        h.append(LogEvent(1.5, service, line, op=name, fields=parse_engine_line(line)))
    return h


def test_backstops_stay_idle():
    by_abort = _released({"a": ("prefill", _PDSIM_ABORTED)})
    assert status(v.backstops_stay_idle(), by_abort) is v.Status.PASS
    by_timeouts = _released({"a": ("prefill", _PDSIM_ABORTED), "b": ("decode", _PDSIM_WAITING)})
    by_timeouts.append(LogEvent(1.6, "prefill", _SGLANG_BOOTSTRAP, op="b"))
    judged = v.backstops_stay_idle()(by_timeouts)
    assert judged.status is v.Status.FAIL, judged.message
    assert judged.evidence.ops == ("b",)
    assert judged.evidence.values["backstops"] == ["bootstrap timeout", "waiting timeout"]
    assert judged.evidence.values["of"] == 2
    router_only = _released({"a": ("router", "request_id=a " + _PDSIM_WAITING)})  # smg repeats engines' bodies
    assert status(v.backstops_stay_idle(), router_only) is v.Status.UNKNOWN


def test_backstops_stay_idle_of_one_workload():
    """Scoped to a workload, only its requests' lines count: a backstop another workload's
    request met (a cut link's, where a timeout is the path) is not this one's failure."""
    h = History()
    for name, workload, line in (("a", "background#1", _PDSIM_WAITING), ("b", "background#2", _PDSIM_ABORTED)):
        h.append(Invoke(0.0, 0.0, name, "/v1/chat/completions", True, workload=workload))
        h.append(Complete(2.0, 0.0, name, Outcome.CLEAN_ERROR, 500, "aborted"))
        h.append(LogEvent(1.5, "decode", line, op=name, fields=parse_engine_line(line)))
    assert status(v.backstops_stay_idle(workload="background#2"), h) is v.Status.PASS
    assert status(v.backstops_stay_idle(workload="background#1"), h) is v.Status.FAIL
    assert status(v.backstops_stay_idle(workload="background#9"), h) is v.Status.UNKNOWN
    assert v.backstops_stay_idle(workload="background#2").name == "backstops_stay_idle(background#2)"


def test_unservable_turned_away():
    def sent(*ends: tuple[float | None, Outcome]) -> History:
        h = History()
        for i, (t1, outcome) in enumerate(ends):
            h.append(Invoke(0.0, 0.0, f"u{i}", "/v1/chat/completions", False, workload="background#3"))
            if t1 is not None:
                h.append(Complete(t1, 0.0, f"u{i}", outcome, 400 if outcome is not Outcome.OK else 200, "too long"))
        op(h, "other", 0, 30.0, Outcome.CLIENT_TIMEOUT, error="another workload's, not judged")
        return h

    check = v.unservable_turned_away(within_s=3.5, workload="background#3")
    assert status(check, sent((0.7, Outcome.CLEAN_ERROR))) is v.Status.PASS
    slow = check(sent((0.7, Outcome.CLEAN_ERROR), (9.0, Outcome.CLEAN_ERROR)))
    assert slow.status is v.Status.FAIL and slow.evidence.ops == ("u1",), slow.message
    assert status(check, sent((1.0, Outcome.OK))) is v.Status.FAIL  # served a prompt over the context
    assert status(check, sent((None, Outcome.OK))) is v.Status.FAIL  # never ended
    assert status(v.unservable_turned_away(within_s=3.5, workload="background#9"), sent()) is v.Status.NOT_AT_STAKE


def _attempt(h: History, t: float, service: str, op_id: str, rid: str, state: str) -> None:
    h.append(LogEvent(t, service, f"rid={rid} state={state}", op=op_id, fields={"rid": rid, "state": state}))


def test_a_success_whose_every_decode_attempt_failed_hides_a_failure():
    """Decode logged the attempt failing and the client got a 200 all the same: a failure
    it was never told of; an attempt failed and a retry served is a true success."""
    hidden, retried, quiet = History(), History(), History()
    for h in (hidden, retried, quiet):
        op(h, "a", 0.0, 8.0, phase="fault")
    _attempt(hidden, 6.0, "decode", "a", "r1", "failed")
    _attempt(hidden, 7.5, "decode", "a", "r1", "finished")  # what it logged after does not undo the failure
    _attempt(retried, 6.0, "decode", "a", "r1", "failed")
    _attempt(retried, 7.5, "decode", "a", "r2", "finished")
    _attempt(quiet, 7.5, "decode", "a", "r1", "finished")
    check = v.failures_reach_the_client()
    judged = check(hidden)
    assert judged.status is v.Status.FAIL and judged.evidence.ops == ("a",), judged
    assert judged.evidence.values["service"] == "decode"
    assert status(check, retried) is v.Status.PASS
    assert status(check, quiet) is v.Status.NOT_AT_STAKE
    # the premise that the fault met a request is met by the hidden failure: a finding, not the rig's miss
    v.require(hidden, v.requests_affected(phase=Phase.FAULT, why="test"))
    from chaos.errors import PremiseNotMet

    with pytest.raises(PremiseNotMet, match="came too late"):
        v.require(quiet, v.requests_affected(phase=Phase.FAULT, why="test"))


def test_an_unclean_failure_says_what_decode_did_with_each_attempt():
    """A client timeout behind smg's retries reads "decode: 2 attempts, each waiting timeout
    after 6s", with the attempts as data: what explore needs to tell the known retry budget
    from a new find."""
    h = History()
    fault(h, 0.5, 30.0)
    op(h, "a", 0.0, 30.0, Outcome.CLIENT_TIMEOUT, error="ReadTimeout")
    for t, rid in ((6.0, "r1"), (12.0, "r2")):
        h.append(LogEvent(t, "decode", _PDSIM_WAITING, op="a", fields={"rid": rid, "state": "failed"}))
    h.append(LogEvent(12.5, "decode", "rid=r3 state=running", op="a", fields={"rid": "r3", "state": "running"}))
    judged = v.failed_requests_are_clean()(h)
    assert judged.status is v.Status.FAIL
    assert judged.evidence.values["attempts"] == {"a": ["waiting timeout after 6s"] * 2 + ["open"]}
    assert judged.evidence.values["ended_by"] == {"a": ["waiting timeout"] * 2 + ["open"]}
    assert "decode: 3 attempts, waiting timeout after 6s, waiting timeout after 6s, open" in judged.message
    outside = v.outcomes_in(set())(h)
    assert outside.evidence.values["attempts"] == judged.evidence.values["attempts"]


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


def test_what_decode_did_with_each_attempt():
    from chaos.judge.attempts import attempts, ended_by, in_words, told

    h = History()
    for t, rid, state, line in (
        (1.0, "r1", "received", "rid=r1 state=received"),
        (2.0, "r1", "failed", _PDSIM_WAITING),
        (2.5, "r1", "finished", "rid=r1 state=finished"),  # a failure, once logged, stands
        (3.0, "r2", "failed", "rid=r2 state=failed error=Aborted"),
        (4.0, "r3", "finished", "rid=r3 state=finished"),
        (4.5, "r4", "running", "rid=r4 state=running"),
    ):
        h.append(LogEvent(t, "decode", line, op="a", fields={"rid": rid, "state": state}))
    h.append(LogEvent(1.0, "prefill", "rid=p1 state=failed", op="a", fields={"rid": "p1", "state": "failed"}))
    h.append(LogEvent(1.0, "decode", "rid=x state=failed", op="other", fields={"rid": "x", "state": "failed"}))
    h.append(LogEvent(1.0, "decode", "no rid", op="a", fields={"state": "failed"}))
    assert attempts(h, "decode", ["a"]) == {"a": {"r1": "failed", "r2": "failed", "r3": "finished", "r4": ""}}
    assert told(h, ["a"]) == {"a": ["waiting timeout after 6s", "failed", "served", "open"]}
    assert told(h, ["a"], "prefill") == {"a": ["failed"]}
    assert ended_by(h, ["a"]) == {"a": ["waiting timeout", "failed", "served", "open"]}
    assert in_words(["served"]) == "decode: 1 attempt, served"
    assert in_words([]) == "decode: no attempt logged"
    assert in_words(["failed", "failed"], "prefill") == "prefill: 2 attempts, each failed"
    assert in_words(["failed", "served"]) == "decode: 2 attempts, failed, served"


def test_an_unmet_premise_keeps_when_the_fault_struck_and_what_it_met():
    from chaos.errors import PremiseNotMet

    h = History()
    fault(h, 2.0, 3.0)
    op(h, "open", 1.0, 2.5, phase="fault")  # open when it struck, and it succeeded
    op(h, "done", 0.0, 1.5, phase="fault")  # done before
    op(h, "edge", 2.0, 2.2, phase="fault")  # sent at the very moment: not open before it
    judged = v.requests_affected(phase=Phase.FAULT, why="t")(h)
    assert judged.status is v.Status.UNMET
    assert judged.evidence.values == {
        "requests": 3,
        "fault_at": 2.0,
        "open_at_fault": 1,
        "open_at_fault_ended": ["ok"],
    }, judged.evidence
    with pytest.raises(PremiseNotMet):
        v.require(h, v.requests_affected(phase=Phase.FAULT, why="t"))


def test_decode_gives_a_prefill_up_within_both_sides_of_its_window():
    """A held fault healed by decode's line passes no sooner than its misses allow; sooner,
    the heartbeat gave up on fewer misses than it is set to; never, the hold ran out."""
    from chaos.observe.history import HEAL_ONCE
    from chaos.observe.pipeline import PREFILL_LOST

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
