"""Explore's pure parts: schedules drawn from a seed, rendered as scenario files, shrunk,
and results classified as data. The end-to-end run on a stack is in test_explore_stack.py."""

from __future__ import annotations

import argparse
import ast
from dataclasses import replace
from pathlib import Path

import pytest

from chaos.errors import ConfigError
from chaos.explore.command import add_parser
from chaos.explore.episode import Episode, Find, Signature, classify
from chaos.explore.health import unhealthy
from chaos.explore.invariants import CUT_BY
from chaos.explore.known import known_for
from chaos.explore.render import function_name, render
from chaos.explore.run import BATCH, Budget, _batch_size
from chaos.explore.schedule import FLUSH, Load, Schedule, Step, Strike, generate, primary_path, strikes_for
from chaos.explore.shrink import candidates, shrink
from chaos.judge.model import Evidence, Role, Status
from chaos.observe.records import Outcome
from chaos.run.results import JudgedVerdict, TestResult
from chaos.system.topology import Topology
from chaos.targets.base import REAL_SGLANG, Capability

ALL = frozenset(Capability)


def _verdict(kind: str, status: Status = Status.FAIL, **values) -> JudgedVerdict:
    return JudgedVerdict(kind, Role.VERDICT, status, kind, "said", {}, Evidence(values))


def _result(outcome: str, *verdicts: JudgedVerdict, message: str = "") -> TestResult:
    return TestResult("f.py::test_s1_e0", outcome, verdicts, message, ())


def test_the_same_seed_draws_the_same_schedules():
    a = [generate(7, e, "embedded", ALL) for e in range(20)]
    assert a == [generate(7, e, "embedded", ALL) for e in range(20)]
    assert a != [generate(8, e, "embedded", ALL) for e in range(20)]
    assert all(Schedule.from_json(s.as_json()) == s for s in a)


def test_the_deck_deals_every_fault_once_before_any_twice():
    dealt = [
        replace(st.strike, trigger="now", held=False)
        for e in range(80)
        for st in generate(4, e, "embedded", ALL).steps
        if st.strike and st.strike.action != FLUSH
    ]
    faults = strikes_for(ALL)
    first, second = dealt[: len(faults)], dealt[len(faults) : 2 * len(faults)]
    assert len(second) == len(faults) and len(set(faults)) == len(faults)
    assert set(first) == set(faults)  # the first round: each once
    assert set(second) == set(faults) and second != first  # the next: each once more, in another order


def test_cache_flushes_come_only_where_the_deck_dealt_nothing():
    """Flushes are drawn apart from the deck: on steps without a fault, never beside
    impatient clients or a request never served, of both engines, on drawn triggers."""
    steps = [st for e in range(80) for st in generate(4, e, "embedded", ALL).steps]
    flushes = [st for st in steps if st.strike and st.strike.action == FLUSH]
    unstruck = [st for st in steps if not st.strike or st.strike.action == FLUSH]
    assert 0 < len(flushes) < len(unstruck)
    assert not any(st.load.shape in ("impatient", "unservable") for st in flushes)
    struck = [st.strike for st in flushes if st.strike]
    assert {s.where for s in struck} == {"prefill", "decode"}
    assert len({s.trigger for s in struck}) > 1
    assert all(primary_path(s) for s in struck)
    text = render(Schedule(1, 0, "embedded", (Step(Load("streams", 2), Strike(FLUSH, "decode", "at_decode")),)))
    assert 'with faults.flush_cache("decode", when=scenario.requests_at("decode") >= 1):' in text


def test_a_link_stalls_each_way_and_the_rendered_file_says_which():
    faults = strikes_for(ALL)
    for action in ("blackhole", "bandwidth", "latency"):
        assert {s.stream for s in faults if s.action == action and s.where == "control"} == {"upstream", "downstream"}
    assert {s.stream for s in faults if s.action in ("down", "reset_peer")} == {""}
    text = render(
        Schedule(1, 0, "embedded", (Step(Load("streams", 2), Strike("blackhole", "control", stream="upstream")),))
    )
    assert 'faults.blackhole("control", stream="upstream")' in text


def test_a_held_fault_outlasts_its_load_until_decode_gives_prefill_up():
    drawn = [st.strike for e in range(120) for st in generate(6, e, "embedded", ALL).steps if st.strike]
    held = [s for s in drawn if s.held]
    assert held and all(s.where in ("bootstrap", "prefill") for s in held)
    assert any(not s.held for s in drawn if s.where == "bootstrap" and s.action == "blackhole")
    text = render(Schedule(1, 0, "embedded", (Step(Load("streams", 2), Strike("kill", "prefill", held=True)),)))
    assert 'faults.kill("prefill", until=scenario.logs("decode", "Lost connection with prefill instance"), ' in text
    assert "hold_s=bounds.heartbeat_detect_s + bounds.slack_s)" in text
    assert "held=" not in text  # a killed prefill: pdsim stops watching it (render._heartbeat_judged)
    frozen = Schedule(1, 0, "embedded", (Step(Load("streams", 2), Strike("freeze", "prefill", held=True)),))
    assert "held=1, held_miss_s=3" in render(frozen)  # judged: decode_gives_prefill_up, each miss a read timeout
    refused = Schedule(1, 0, "embedded", (Step(Load("streams", 2), Strike("down", "bootstrap", held=True)),))
    assert "held=1, held_miss_s=0" in render(refused)  # each miss refused at once: the lower bound is the interval's


def test_schedules_fire_only_what_the_target_can():
    real = [generate(3, e, "sglang-cpu", REAL_SGLANG, max_steps=3) for e in range(40)]
    wheres = {s.strike.where for sch in real for s in sch.steps if s.strike}
    assert wheres and not wheres & {"kv", "control"}  # real SGLang's engine links are not proxied there
    delayed = {s.where for s in strikes_for(REAL_SGLANG) if s.action == "latency"}
    assert delayed == {"client_router"}  # REAL_SGLANG alone: no delay on the engine links without link_delay


def test_an_unservable_load_or_impatient_clients_take_no_card():
    drawn = [st for e in range(200) for st in generate(5, e, "embedded", ALL).steps]
    assert {st.load.shape for st in drawn} >= {"unservable", "impatient"}
    assert not any(st.strike for st in drawn if st.load.shape in ("unservable", "impatient"))


def test_every_drawn_schedule_renders_a_scenario_file():
    for e in range(30):
        s = generate(11, e, "embedded", ALL)
        tree = ast.parse(render(s, note="a note"))
        assert any(isinstance(n, ast.FunctionDef) and n.name == function_name(s) for n in tree.body)


def test_a_rendered_step_starts_its_load_and_heals_after_it():
    s = Schedule(
        1,
        0,
        "embedded",
        (Step(Load("conversation", 2, rounds=3, words=30, max_tokens=64), Strike("kill", "decode", "at_decode")),),
    )
    text = render(s)
    assert "scenario.baseline(agents=2, rounds=3, words_per_round=30, max_tokens=64, deadlines=d)" in text
    assert "load1 = workload.conversations(agents=2, rounds=3" in text
    assert 'with faults.kill("decode", when=scenario.requests_at("decode") >= 1):\n        load1.join()\n' in text
    # again once healed and serving
    assert "load1.join()\n    workload.probe_until_ok(within_s=bounds.recovery_s)\n    workload.conversations(" in text
    assert "every_heal" not in text  # one fault: settle's recovers judges its heal
    assert "judge_universal(scenario, d, baseline=True, conversations=True, decodes_ended=('decode',))" in text
    # a decode killed may leave rooms only its watchdog frees: the leak window is its bound
    assert "settle_universal(scenario, bounds, decode_ended=True)" in text
    assert "return 1  #" in text  # the seed is pinned in the file


def test_an_unservable_request_a_fault_meets_is_not_held_to_the_door_bound():
    s = Schedule(1, 0, "embedded", (Step(Load("unservable", 1), Strike("freeze", "prefill")),))
    assert "unservable_turned_away" not in render(s)  # a frozen prefill cannot refuse it


def test_impatient_clients_hang_up_inside_their_own_block_and_fire_nothing_else():
    drawn = [st for e in range(200) for st in generate(9, e, "embedded", ALL).steps]
    assert any(st.load.shape == "impatient" for st in drawn)
    assert all(st.strike is None for st in drawn if st.load.shape == "impatient")
    s = Schedule(1, 0, "embedded", (Step(Load("impatient", 4, words=10, max_tokens=200)),))
    text = render(s)
    assert 'with faults.by_clients("4 streams hung up after 2 events"):\n        workload.background(' in text
    assert "hang_up_after=2).join()" in text
    assert "settle_universal(scenario, bounds)" in text  # the hang-ups healed: recovery and quiet judged


@pytest.mark.parametrize(
    ("strikes", "judged"),
    [
        ((None, Strike("abort_all", "decode", "at_decode")), True),  # hang-ups and an abort: primary paths
        ((None, None), True),  # load alone
        ((Strike("abort_all", "prefill"), Strike("down", "control")), False),  # a cut link: a timeout may be its path
        ((Strike("kill", "router"),), False),  # smg gone: nothing drops the engines' legs
        ((None, Strike("down", "kv", "at_decode")), True),  # the transfer fails at once: prefill tells decode
        ((None, Strike("blackhole", "kv")), False),  # the KV swallowed: decode's waiting timeout is the path
    ],
)
def test_backstops_are_judged_where_only_primary_paths_acted(strikes, judged):
    loads = (Load("impatient", 3, words=10, max_tokens=200), Load("streams", 2, max_tokens=100))
    steps = zip(loads, strikes, strict=False)  # as many steps as strikes: the loads are a menu
    s = Schedule(1, 0, "embedded", tuple(Step(load, strike) for load, strike in steps))
    assert ("primary_only=True" in render(s)) is judged


def test_a_primary_step_beside_other_faults_judges_backstops_on_its_own_requests():
    s = Schedule(
        1,
        0,
        "embedded",
        (Step(Load("streams", 2), Strike("freeze", "decode")), Step(Load("streams", 2), Strike("down", "kv", "now"))),
    )
    text = render(s)
    assert "primary_only" not in text  # the freeze: a timeout may be its path
    assert "scenario.judge(v.backstops_stay_idle(workload=load2.name))" in text
    assert "workload=load1.name" not in text


def test_load_alone_is_bracketed_as_the_clients_own_and_judged_quiet():
    s = Schedule(1, 0, "embedded", (Step(Load("unservable", 1)), Step(Load("burst", 6, words=200, max_tokens=200))))
    text = render(s)
    judged = "scenario.judge(v.unservable_turned_away(within_s=bounds.refuse_s, workload=load1.name))"
    assert "    load1.join()\n        " + judged in text  # no fault in its way: turned away at the door
    assert 'with faults.by_clients("load alone, no fault"):\n        load1 = workload.background(' in text
    assert "Phase.AFTER" not in text  # inside the block: no load is taken for after a fault
    assert "quiet_universal(scenario, bounds)" in text and "settle_universal" not in text.split("def test_")[1]


@pytest.mark.parametrize(
    ("strike", "cut"),
    [
        (Strike("down", "client_router", "at_decode"), "link"),
        (Strike("kill", "router", "at_decode"), "router_killed"),
        (Strike("terminate", "router"), "router_drained"),
        (Strike("freeze", "decode", "at_decode"), "decode_frozen"),
        (Strike("blackhole", "kv"), None),
    ],
)
def test_a_fault_on_the_clients_hop_judges_its_window_by_what_a_cut_allows(strike, cut):
    s = Schedule(1, 0, "embedded", (Step(Load("streams", 3, max_tokens=100)), Step(Load("requests", 2), strike)))
    text = render(s)
    assert (
        "judge_universal(scenario, d, baseline=True, conversations=False" + (f', cut="{cut}"' if cut else "")
    ) in text
    assert (", drained=True" in text) is (strike.action == "terminate")  # a SIGTERM's open streams must finish


def test_candidates_are_each_smaller():
    s = generate(2, 4, "embedded", ALL, max_steps=3)
    s = s.with_steps([*s.steps, Step(Load("streams", 4, words=200, max_tokens=200), Strike("down", "kv"))])
    for c in candidates(s):
        assert c.size() < s.size()


def test_shrink_keeps_only_what_still_fails():
    """Planted: the failure needs a kill of decode; everything else goes."""
    big = Schedule(
        1,
        0,
        "embedded",
        (
            Step(Load("streams", 5, words=200, max_tokens=200), Strike("latency", "client_router", "now", 300)),
            Step(Load("conversation", 3, rounds=4, words=120, max_tokens=64), Strike("kill", "decode", "at_decode")),
            Step(Load("requests", 2)),
        ),
    )

    def fails(s: Schedule) -> bool:
        return any(st.strike and st.strike.action == "kill" for st in s.steps)

    small, tried = shrink(big, fails, budget_s=60)
    assert small.steps == (
        Step(Load("conversation", 1, rounds=2, words=10, max_tokens=8), Strike("kill", "decode", "at_decode")),
    )
    assert tried > 0


def test_shrink_stops_at_its_budget():
    ticks = iter(range(100))
    s = generate(2, 1, "embedded", ALL)
    small, tried = shrink(s, lambda _: True, budget_s=3, clock=lambda: float(next(ticks)))
    assert tried <= 3 and small.size() <= s.size()


def test_budget():
    assert Budget.parse("10m") == Budget(seconds=600)
    assert Budget.parse("90s") == Budget(seconds=90)
    assert Budget.parse("12") == Budget(episodes=12)
    with pytest.raises(ConfigError):
        Budget.parse("ten minutes")
    assert Budget(episodes=2).left(0, 1, 1e9) and not Budget(episodes=2).left(0, 2, 0)


def test_a_signature_is_the_kind_and_the_shape_of_the_evidence():
    a = Signature.of(_verdict("failed_requests_are_clean", outcomes=["truncated"], count=3, of=4))
    b = Signature.of(_verdict("failed_requests_are_clean", outcomes=["truncated"], count=1, of=9))
    c = Signature.of(_verdict("failed_requests_are_clean", outcomes=["client_timeout"], count=3, of=4))
    assert a == b and a != c
    assert str(a) == 'failed_requests_are_clean [outcomes=["truncated"]]'


def test_classify_keeps_rig_errors_apart_from_finds():
    s = generate(1, 0, "embedded", ALL)
    assert classify(s, None, ALL, rc=-1)[0] == "rig error"
    assert (
        classify(s, _result("error", _verdict("no_leak"), message="TriggerTimeout: ..."), ALL, rc=1)[0] == "rig error"
    )
    assert classify(s, _result("passed"), ALL, rc=0)[0] == "passed"
    state, found, _, _ = classify(s, _result("failed", _verdict("context_grows")), ALL, rc=1)
    assert state == "found" and [v.kind for v in found] == ["context_grows"]
    unsure = _verdict("replies_match_baseline", Status.UNKNOWN)
    assert classify(s, _result("failed", unsure), ALL, rc=1)[0] == "inconclusive"


def test_a_known_issue_explains_only_its_own_schedule_and_evidence():
    frozen = Schedule(1, 0, "embedded", (Step(Load("streams", 2), Strike("freeze", "prefill")),))
    killed = Schedule(1, 0, "embedded", (Step(Load("streams", 2), Strike("kill", "decode")),))
    hung = _verdict("failed_requests_are_clean", outcomes=["client_timeout"])
    cut = _verdict("failed_requests_are_clean", outcomes=["truncated"])
    assert known_for(frozen, hung, ALL) is not None
    assert known_for(frozen, cut, ALL) is None  # a truncated stream is not smg's missing headers
    assert known_for(killed, hung, ALL) is None
    # where a router kill elsewhere in the episode cut the client's hop, the same clients fail
    # outcomes_in instead (sglang-cpu, seed 2, episode 39)
    also_cut = Schedule(1, 0, "embedded", (*frozen.steps, Step(Load("requests", 5), Strike("kill", "router"))))
    assert known_for(also_cut, _verdict("outcomes_in", outcomes=["client_timeout"]), ALL) is not None
    assert known_for(also_cut, _verdict("outcomes_in", outcomes=["stalled"]), ALL) is None
    both = {"decode": 2, "prefill": 2}
    assert known_for(killed, _verdict("charged_only_where_struck", struck=["decode"], charged=both), ALL) is not None
    no_struck = _verdict("charged_only_where_struck", struck=[], charged=both)
    assert known_for(killed, no_struck, ALL) is None  # no engine struck
    # prefill charged while the struck decode was not: not smg charging both legs of a PD attempt
    alone = _verdict("charged_only_where_struck", struck=["decode"], charged={"decode": 0, "prefill": 1})
    assert known_for(killed, alone, ALL) is None
    assert classify(frozen, _result("failed", hung), ALL, rc=1)[0] == "known"
    by_prefill = Schedule(1, 0, "embedded", (Step(Load("streams", 2), Strike("abort_all", "prefill", "at_decode")),))
    by_decode = Schedule(1, 0, "embedded", (Step(Load("streams", 2), Strike("abort_all", "decode", "at_decode")),))
    waited = _verdict("backstops_stay_idle", backstops=["waiting timeout"])
    assert known_for(by_prefill, waited, ALL) is not None  # decode never told of prefill's abort
    assert known_for(by_decode, waited, ALL) is None  # decode's own abort tells prefill: a find
    assert known_for(by_prefill, _verdict("backstops_stay_idle", backstops=["bootstrap timeout"]), ALL) is None


def test_a_shrink_budget_is_a_time_never_silently_a_default():
    ap = argparse.ArgumentParser()
    add_parser(ap.add_subparsers())
    assert ap.parse_args(["explore", "--shrink-budget", "12"]).shrink_budget == 12.0  # seconds
    assert ap.parse_args(["explore", "--shrink-budget", "2m"]).shrink_budget == 120.0
    assert ap.parse_args(["explore"]).shrink_budget == 300.0
    with pytest.raises(SystemExit):
        ap.parse_args(["explore", "--shrink-budget", "ten"])


def test_every_cut_of_a_schedule_is_allowed_its_ends():
    s = Schedule(
        1,
        0,
        "embedded",
        (Step(Load("streams", 2), Strike("kill", "router")), Step(Load("streams", 2), Strike("freeze", "decode"))),
    )
    assert "cut=('router_killed', 'decode_frozen')" in render(s)  # a stall in the freeze's window is its due


def test_a_client_may_hang_up_whatever_cuts_its_hop():
    assert all(Outcome.HUNG_UP in ends for ends in CUT_BY.values())  # found by the bench: impatient beside a cut


def test_each_step_after_a_fault_waits_for_service_and_every_heal_is_judged():
    s = Schedule(
        1,
        0,
        "embedded",
        (
            Step(Load("streams", 2), Strike("kill", "decode")),
            Step(Load("impatient", 2, words=10, max_tokens=200)),
            Step(Load("streams", 2), Strike("down", "kv", "at_decode")),
        ),
    )
    text = render(s)
    assert text.count("workload.probe_until_ok(within_s=bounds.recovery_s)") == 3  # after each fault block
    assert "every_heal=True" in text


def test_a_batch_is_sized_to_end_about_when_the_budget_does():
    ep = Episode(Schedule(1, 0, "embedded", ()), "passed", Path("f"), 15.0)
    assert _batch_size(Budget(episodes=10), [ep] * 8, 0) == 2  # two episodes left
    assert _batch_size(Budget(seconds=600), [ep] * 4, 60) == BATCH
    assert _batch_size(Budget(seconds=600), [ep] * 4, 570) == 2  # 30 s left: two 15 s episodes
    assert _batch_size(Budget(seconds=600), [ep] * 4, 599) == 1  # never none while time is left


def _episode(state: str) -> Episode:
    return Episode(generate(1, 0, "embedded", ALL), state, Path("t.py"), 1.0)


def test_a_run_made_of_unjudged_episodes_is_unhealthy():
    assert unhealthy([]) == "no episode ran"
    judged = [_episode("passed")] * 3 + [_episode("known")]
    assert unhealthy(judged) == ""
    assert unhealthy([*judged, _episode("inconclusive")]) == ""  # 1 of 5: within the share
    blind = unhealthy([_episode("passed"), _episode("inconclusive"), _episode("rig error")])
    assert blind.startswith("2 of 3 episodes could not be judged (1 inconclusive, 1 rig error)"), blind
    assert unhealthy([_episode("inconclusive")] * 4).startswith("4 of 4")


def test_a_find_no_rerun_repeated_is_flaky_not_found():
    ep = _episode("found")
    sig = Signature("outcomes_in", (), ())
    assert Find(ep, sig, Path(), ep.schedule, 3, 0, 5, 1.0).flaky
    assert not Find(ep, sig, Path(), ep.schedule, 3, 1, 5, 1.0).flaky
    assert not Find(ep, sig, Path(), ep.schedule, 3, 0, 0, 1.0).flaky  # not rerun: its rate is not known


def test_a_client_timeout_behind_retried_waiting_timeouts_is_smgs_known_retry_budget():
    stuck = Schedule(1, 0, "embedded", (Step(Load("requests", 1), Strike("blackhole", "kv", stream="upstream")),))
    retried = _verdict(
        "failed_requests_are_clean",
        outcomes=["client_timeout"],
        ended_by={"op1": ["waiting timeout"] * 5},
    )
    known = known_for(stuck, retried, ALL)
    assert known is not None and known.component == "smg" and "retries" in known.behaviour
    once = _verdict("failed_requests_are_clean", outcomes=["client_timeout"], ended_by={"op1": ["waiting timeout"]})
    assert known_for(stuck, once, ALL) is None  # one attempt: no retry multiplied anything
    other = _verdict("failed_requests_are_clean", outcomes=["client_timeout"], ended_by={"op1": ["open", "open"]})
    assert known_for(stuck, other, ALL) is None  # the attempts were not ended by decode's timeout
    mixed = _verdict(
        "failed_requests_are_clean", outcomes=["client_timeout"], ended_by={"op1": ["waiting timeout", "failed"]}
    )
    assert known_for(stuck, mixed, ALL) is None  # one attempt failed otherwise: not the retry budget alone
    words = _verdict(
        "failed_requests_are_clean", outcomes=["client_timeout"], attempts={"op1": ["waiting timeout after 6s"] * 5}
    )
    assert known_for(stuck, words, ALL) is None  # the report's words are not the evidence matched


@pytest.mark.parametrize("cut", sorted(CUT_BY))
def test_each_cuts_outcomes_need_a_fault_to_cause_them(cut):
    """For every cut, an outcome it allows passes while the request was open during the
    fault, and fails once it ended so with no fault to cause it: sent after the heal, or
    cut short with no byte before the fault ended."""
    from chaos import verdicts as v
    from chaos.observe.history import History
    from chaos.observe.records import Complete, FaultEvent, Invoke, Phase, Stage

    allowed = CUT_BY[cut]
    check = v.outcomes_in(set(allowed), phase=Phase.FAULT, explained=True)
    for outcome in sorted(allowed - {Outcome.CLEAN_ERROR, Outcome.HUNG_UP}, key=lambda o: o.value):
        caused, late, unbegun = History(), History(), History()
        for h in (caused, late, unbegun):
            h.append(FaultEvent(1.0, 0.0, "f#1", Stage.INJECT, cut))
            h.append(FaultEvent(5.0, 0.0, "f#1", Stage.HEALED, cut))
        for h, (sent, first) in ((caused, (0.5, 0.8)), (late, (6.0, 6.2)), (unbegun, (0.5, None))):
            h.append(Invoke(sent, 0.0, "a", "/v1/chat/completions", True, phase=Phase.FAULT))
            h.append(Complete(sent + 3.0, 0.0, "a", outcome, 200, "cut", first_byte_t=first))
        assert check(caused).status is Status.PASS, (cut, outcome, check(caused).message)
        assert check(late).status is Status.FAIL, (cut, outcome)
        assert "open while no fault was" in check(late).message
        if outcome is Outcome.TRUNCATED:
            assert check(unbegun).status is Status.FAIL and "no byte before" in check(unbegun).message
    # a clean error is always a clean end: no fault needed
    clean = History()
    clean.append(Invoke(0.0, 0.0, "a", "/v1/chat/completions", True, phase=Phase.FAULT))
    clean.append(Complete(1.0, 0.0, "a", Outcome.CLEAN_ERROR, 500, "boom"))
    assert check(clean).status is Status.PASS


def test_a_fault_never_healed_explains_what_it_met_until_the_history_ends():
    from chaos import verdicts as v
    from chaos.observe.history import History
    from chaos.observe.records import Complete, FaultEvent, Invoke, Phase, Stage

    check = v.outcomes_in({Outcome.CLIENT_TIMEOUT}, phase=Phase.FAULT, explained=True)
    h = History()
    h.append(FaultEvent(1.0, 0.0, "f#1", Stage.INJECT, "freeze decode"))
    h.append(FaultEvent(1.5, 0.0, "f#2", Stage.HEALED, "a heal of no fault injected here"))
    h.append(Invoke(8.0, 0.0, "a", "/v1/chat/completions", True, phase=Phase.FAULT))
    h.append(Complete(9.0, 0.0, "a", Outcome.CLIENT_TIMEOUT, None, "timeout"))
    assert check(h).status is Status.PASS, check(h).message  # still frozen when it was sent


def test_a_topology_deals_faults_on_every_engine_and_its_links():
    """2P1D on pdsim: the second prefill is killed, frozen, aborted like the first, its
    bootstrap and control proxies broken; on real SGLang only its bootstrap proxy (its control
    link is packet rules on the first pair's ports). The schedule names its topology, and a
    trigger at prefill waits on the engine struck."""
    two = Topology(2, 1)
    where = {s.where for s in strikes_for(ALL, two)}
    assert {"prefill2", "bootstrap2", "control2"} <= where and "kv2" not in where
    assert {"prefill2", "bootstrap2"} <= {s.where for s in strikes_for(REAL_SGLANG | {Capability.CONTROL_LINK}, two)}
    assert "control2" not in {s.where for s in strikes_for(REAL_SGLANG | {Capability.CONTROL_LINK}, two)}
    assert strikes_for(ALL) == strikes_for(ALL, Topology())  # one of each: the deck it always was
    drawn = [generate(3, e, "embedded", ALL, topology=two) for e in range(30)]
    assert all(s.topology == "2p1d" and Schedule.from_json(s.as_json()) == s for s in drawn)
    assert any(st.strike and st.strike.where.endswith("2") for s in drawn for st in s.steps)
    killed = Schedule(1, 0, "embedded", (Step(Load("streams", 2), Strike("kill", "prefill2", "at_prefill")),), "2p1d")
    text = render(killed)
    assert 'faults.kill("prefill2", when=scenario.received("prefill2"))' in text
    assert "--target embedded --topology 2p1d" in text
    decode2 = Schedule(1, 0, "embedded", (Step(Load("streams", 2), Strike("kill", "decode2", "at_decode")),), "1p2d")
    assert "decodes_ended=('decode2',)" in render(decode2)
    assert 'scenario.requests_at("decode2") >= 1' in render(decode2)
