"""The suites' own verdicts (declared next to their scenarios): each check passes on a good
history and fails (or is unknown) on a crafted bad one, histories written by hand."""

from __future__ import annotations

from chaos import verdicts as v
from chaos.observe.growth import Limit
from chaos.observe.history import History
from chaos.observe.logs import parse_engine_line
from chaos.observe.pipeline import Metric
from chaos.observe.records import Chunk, Complete, FaultEvent, Invoke, LogEvent, Outcome, Phase, Stage
from suites.test_circuit_breaker import statuses_in
from suites.test_decode_radix_cache import conversations_finish, prefix_reused
from suites.test_engine_hooks import some_served
from suites.test_hostile_input import decode_legs_own_replies
from suites.test_idle_burst import first_bytes_as_fast_after_idle
from suites.test_mismatched_engines import refused_naming_the_mismatch
from suites.test_neighbour_stall import stream_gaps_at_most
from suites.test_overload import gauge_reached, queued_for, refused_within, served_or_refused
from suites.test_proxy_wedge import stuck_before_router
from suites.test_reply_endings import Ending, replies_end_where_asked
from suites.test_retry_amplification import amplification_at_most, requests_retried
from suites.test_soak import does_not_grow
from suites.test_twin_overload import began_inside_the_veto
from tests.judge.histories import fault, op, series, soak_history, status


def test_stuck_before_router():
    check = stuck_before_router(router_counter="reqs")
    before, after = History(), History()
    for h, inside in ((before, 10), (after, 12)):
        fault(h, 1.0, 3.0)
        op(h, "a", 1.5, 2.5, Outcome.CLIENT_TIMEOUT)
        series(h, "router", "reqs", [(0.5, 9), (1.3, 10), (2.0, inside), (2.9, inside)])
    assert status(check, before) is v.Status.PASS
    assert status(check, after) is v.Status.FAIL


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


def test_does_not_grow():
    fds = Limit(Metric("procs", "open_fds:decode"), 8, unit=" fds")
    check = does_not_grow([fds])
    flat = soak_history([(t, 14.0 + (t % 2)) for t in range(0, 40, 2)])  # noise, no trend
    leaking = soak_history([(t, 14.0 + t) for t in range(0, 40, 2)])  # one descriptor a second
    short = soak_history([(0, 14.0), (2, 14.0)])
    assert status(check, flat) is v.Status.PASS and "fds/h" in check(flat).message
    assert status(check, leaking) is v.Status.FAIL and "open_fds:decode +3.6e+03 fds/h" in check(leaking).message
    assert status(check, short) is v.Status.UNKNOWN


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


def _ending(h: History, name: str, context: str, phase: Phase, reply: str, tokens: int, finish: str) -> None:
    h.append(Invoke(0.1, 0.0, name, "/v1/chat/completions", False, context=context, phase=phase, max_tokens=16))
    h.append(Complete(0.2, 0.0, name, Outcome.OK, 200, "", reply, 5, tokens, 0.15, finish))


def _endings_history(*, first_tokens: int = 1, stopped: str = " ", late: str = " oak elm ", late_tokens: int = 3):
    """One context: its full reply " oak elm fir" (4 tokens), its first token " oak"; asked
    again for one token, for the stop "o" (inside the first token) and "fir" (past it)."""
    h = History()
    _ending(h, "full", "F", Phase.BASELINE, " oak elm fir", 4, "length")
    _ending(h, "first", "O", Phase.BASELINE, " oak", first_tokens, "length")
    _ending(h, "again", "O", Phase.FAULT, " oak", 1, "length")
    _ending(h, "stop-o", "S1", Phase.FAULT, stopped, 1, "stop")
    _ending(h, "stop-fir", "S2", Phase.FAULT, late, late_tokens, "stop")
    return h


ENDINGS = [Ending("O", "F", "O", None), Ending("S1", "F", "O", "o"), Ending("S2", "F", "O", "fir")]


def test_replies_end_where_asked():
    check = replies_end_where_asked(ENDINGS)
    good = check(_endings_history())
    assert good.status is v.Status.PASS and good.evidence.values["of"] == 4
    # decode ran past the first token: one token more than asked
    assert status(check, _endings_history(first_tokens=2)) is v.Status.FAIL
    # the stop string left in the text (an engine that does not trim it)
    assert status(check, _endings_history(late=" oak elm fir")) is v.Status.FAIL
    # the stop inside prefill's token answered with decode's tokens as well
    assert status(check, _endings_history(stopped=" oak elm")) is v.Status.FAIL
    # a stop past the first token cannot have ended the reply at its first token
    assert status(check, _endings_history(late_tokens=1)) is v.Status.FAIL


def test_replies_end_where_asked_without_references_is_unknown():
    h = History()
    _ending(h, "stop-o", "S1", Phase.FAULT, " ", 1, "stop")
    assert status(replies_end_where_asked(ENDINGS), h) is v.Status.UNKNOWN


def _legs(second_reply: str) -> History:
    """Two prompts' replies through the router (baseline), then each sent straight to the
    engines: prefill's legs answer one token, decode's the reply."""
    h = History()
    for i, (ctx, reply) in enumerate((("A", " oak elm"), ("B", " fir ash"))):
        h.append(Invoke(0.1 * i, 0.0, f"base{i}", "/generate", False, context=ctx, phase=Phase.BASELINE))
        h.append(Complete(0.1 * i + 0.05, 0.0, f"base{i}", Outcome.OK, 200, reply=reply))
    for i, (ctx, reply) in enumerate((("A", " oak elm"), ("B", second_reply))):
        for leg, said in (("prefill", reply[:4]), ("decode", reply)):
            op_id = f"{leg}{i}"
            h.append(Invoke(1.0, 0.0, op_id, "/generate", False, context=ctx, phase=Phase.FAULT, workload=f"{leg}-leg"))
            h.append(Complete(1.5, 0.0, op_id, Outcome.OK, 200, reply=said))
    return h


def test_decode_legs_own_replies():
    check = decode_legs_own_replies()
    own = check(_legs(" fir ash"))
    assert own.status is v.Status.PASS and own.evidence.values["of"] == 2  # prefill's one-token legs not compared
    mixed = check(_legs(" oak elm"))  # the second pair served the first's reply
    assert mixed.status is v.Status.FAIL and mixed.evidence.values["wrong"] == 1
    assert status(check, History()) is v.Status.UNKNOWN


def test_some_served():
    served, none = History(), History()
    for h, second in ((served, Outcome.OK), (none, Outcome.CLEAN_ERROR)):
        op(h, "a", 0.0, 1.0, Outcome.CLEAN_ERROR, phase="fault")
        op(h, "b", 0.0, 1.0, second, phase="fault")
    check = some_served(phase=Phase.FAULT, why="test")
    assert status(check, served) is v.Status.PASS  # a premise met
    assert status(check, none) is v.Status.UNMET  # the hooks failed every one: nothing to judge the rest by
    assert status(check, History()) is v.Status.UNMET


def _burst(h: History, rnd: int, t: float, first_byte_s: float, outcome: Outcome = Outcome.OK) -> None:
    """Two agents' streams of round ``rnd`` sent at ``t``, each beginning ``first_byte_s`` later."""
    for agent in ("agent0", "agent1"):
        name = f"{agent}-{rnd}"
        h.append(Invoke(t, 0.0, name, "/v1/chat/completions", True, agent, rnd, phase=Phase.FAULT))
        first = t + first_byte_s if outcome is Outcome.OK else None
        h.append(Complete(t + first_byte_s + 0.2, 0.0, name, outcome, 200, "", "r", 10, 2, first))


def _idle(h: History, n: int, start: float, over: float) -> None:
    for t, stage in ((start, Stage.INJECT), (over, Stage.HEALED)):
        h.append(FaultEvent(t, 0.0, f"idle#{n}", stage, "no request", action="idle"))


def test_first_bytes_as_fast_after_idle():
    """The burst after each idle is held to the reference round's slowest first byte plus
    the bound; one stalled stream after the second idle fails it; a burst with nothing served
    is unknown, as is a history with no idle."""
    check = first_bytes_as_fast_after_idle(1.0, reference_round=1)
    histories = {}
    for name, after_second in (("brisk", 0.4), ("stalled", 4.9), ("unserved", 0.4)):
        h = History()
        _burst(h, 0, 0.0, 2.5)  # the warm-up: slow, and not the reference
        _burst(h, 1, 3.0, 0.3)
        _idle(h, 1, 4.0, 10.0)
        _burst(h, 2, 10.0, 0.5)
        _idle(h, 2, 11.0, 66.0)
        _burst(h, 3, 66.0, after_second, Outcome.CLEAN_ERROR if name == "unserved" else Outcome.OK)
        histories[name] = h
    brisk = check(histories["brisk"])
    assert brisk.status is v.Status.PASS and brisk.evidence.values["at_stake"] == 4, brisk
    stalled = check(histories["stalled"])
    assert stalled.status is v.Status.FAIL and "4.90s after 55s idle" in stalled.message, stalled
    assert stalled.evidence.ops == ("agent0-3", "agent1-3")
    assert "55s" in check(histories["unserved"]).message and status(check, histories["unserved"]) is v.Status.UNKNOWN
    assert status(check, History()) is v.Status.UNKNOWN


def test_refused_naming_the_mismatch():
    """Each request must fail cleanly, in time, naming the mismatch: one served, one slow, or
    one whose error names something else fails it; none at all is not at stake."""
    check = refused_naming_the_mismatch(1.0, phase=Phase.FAULT, words=("page size",))
    named = "Page size mismatch: prefill server has page_size=1, but decode server has page_size=16."
    cases = {
        "refused": [(0.3, Outcome.CLEAN_ERROR, named), (0.4, Outcome.CLEAN_ERROR, named)],
        "served": [(0.3, Outcome.CLEAN_ERROR, named), (0.4, Outcome.OK, "")],
        "slow": [(0.3, Outcome.CLEAN_ERROR, named), (6.2, Outcome.CLEAN_ERROR, named)],
        "vague": [(0.3, Outcome.CLEAN_ERROR, named), (0.4, Outcome.CLEAN_ERROR, "Transport error")],
    }
    judged = {}
    for name, ends in cases.items():
        h = History()
        for i, (took, outcome, error) in enumerate(ends):
            h.append(Invoke(float(i), 0.0, f"r{i}", "/v1/chat/completions", True, phase=Phase.FAULT))
            status_code = 200 if outcome is Outcome.OK else 500
            h.append(Complete(i + took, 0.0, f"r{i}", outcome, status_code, error, "", 2, 2))
        judged[name] = check(h)
    assert judged["refused"].status is v.Status.PASS and judged["refused"].evidence.values["at_stake"] == 2
    assert "ended ok" in judged["served"].message and judged["served"].status is v.Status.FAIL
    assert "failed after 6.20s" in judged["slow"].message and judged["slow"].status is v.Status.FAIL
    assert "names no mismatch" in judged["vague"].message and judged["vague"].evidence.ops == ("r1",)
    assert status(check, History()) is v.Status.NOT_AT_STAKE


def _router(h: History, *lines: tuple[str, dict[str, str]]) -> None:
    for op_id, fields in lines:
        h.append(LogEvent(0.0, "router", "", op=op_id, fields=fields))


def test_began_inside_the_veto():
    """Only a request smg began between the twin's veto and its clearing, while the struck
    worker was not yet Failed, is one the veto routed: smg's order, not its 1 s stamps."""
    twin, struck, prefill = "http://t", "http://s", "http://p"
    veto, cleared = {"worker": twin, "veto": "set"}, {"worker": twin, "veto": "cleared"}
    failed = {"worker": struck, "status": "Failed"}
    began = {"state": "started"}
    inside, after, once_failed, other_worker, both = History(), History(), History(), History(), History()
    _router(inside, ("a", began), ("", veto), ("b", began), ("b", {"state": "finished"}), ("", cleared))
    _router(after, ("a", began), ("", veto), ("", cleared), ("b", began))
    _router(once_failed, ("", failed), ("", veto), ("b", began))
    _router(other_worker, ("", {"worker": struck, "veto": "set"}), ("b", began))
    # every prefill vetoed too: smg 1.13.0 routes past the vetoes, so those requests do not count
    _router(both, ("", veto), ("a", began), ("", {"worker": prefill, "veto": "set"}), ("b", began))
    check = began_inside_the_veto(twin=twin, struck=struck, others=(prefill,), why="x")
    assert status(check, inside) is v.Status.PASS and check(inside).evidence.ops == ("b",)
    assert status(check, both) is v.Status.PASS and check(both).evidence.ops == ("a",)
    for h in (after, once_failed, other_worker, History()):
        assert status(check, h) is v.Status.UNMET
