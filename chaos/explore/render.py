"""A schedule as a scenario file in the style of the README's template: what explore runs is
this file, so the reproducer it leaves is exactly what failed. ``pytest <file> --target T``
runs it again."""

from __future__ import annotations

import textwrap

from chaos.explore.schedule import HANG_UP_AFTER, Load, Schedule, Step, Strike, cuts, primary_path
from chaos.faults.kinds import ends_serving
from chaos.observe.pipeline import PREFILL_LOST
from chaos.system.topology import is_engine, kind_of, link_ends
from chaos.targets.stack import HEARTBEAT_READ_S

__all__ = ["function_name", "render"]

_TRIGGERS = {
    "now": "",
    # prefill holds a short prompt for milliseconds: its log, not a 10 Hz gauge, says it came
    "at_prefill": ', when=scenario.received("{prefill}")',
    "at_decode": ', when=scenario.requests_at("{decode}") >= 1',
    "mid_stream": ", when=scenario.streams_begun(1)",
}


def _near(where: str, kind: str) -> str:
    """The engine of ``kind`` a strike on ``where`` concerns: the struck engine itself, the
    end of a struck link (``kv2``: decode2), else the first of its kind."""
    if is_engine(where):
        return where if kind_of(where) == kind else kind
    if where in ("client_router", "router"):
        return kind
    return next(e for e in link_ends(where) if kind_of(e) == kind)


def function_name(schedule: Schedule) -> str:
    return f"test_{schedule.name()}"


def _texts(schedule: Schedule, k: int, load: Load) -> str:
    """The load's bodies, the same in its baseline and its run: equal contexts, equal replies.
    A stream asks for its usage, so that its finish reason can be held against its tokens."""
    stream = load.shape != "requests"  # an impatient client hangs up on a stream
    usage = ', stream_options={"include_usage": True}' if stream else ""
    return (
        f'[workload.chat(f"{schedule.name()} load{k} #{{i}}: " + "river " * {load.words}, '
        f"max_tokens={load.max_tokens}, ignore_eos=True, stream={stream}{usage}) for i in range({load.count})]"
    )


def _send(schedule: Schedule, k: int, load: Load, *, faulted: bool) -> str:
    """The call that starts load ``k`` in the background. A load no fault meets states
    ``Phase.AFTER``: before any fault the history would take it for a baseline, and its
    replies are to be held against the baseline, not to be one."""
    phase = "" if faulted else ", phase=Phase.AFTER"
    if load.shape == "conversation":
        return (
            f"workload.conversations(agents={load.count}, rounds={load.rounds}, words_per_round={load.words}, "
            f"max_tokens={load.max_tokens}, deadlines=d{phase}).start()"
        )
    if load.shape == "unservable":  # over every model's context: refused, never served
        return (
            f'workload.background([workload.chat("word " * 70_000, max_tokens=2)], deadlines=d{phase}, '
            f'invalid="over any context")'
        )
    if load.shape == "impatient":  # the clients' own fault: hung up mid-stream
        return f"workload.background({_texts(schedule, k, load)}, deadlines=d, hang_up_after={HANG_UP_AFTER})"
    interval = ", interval_s=0.05" if load.shape == "burst" else ""
    return f"workload.background({_texts(schedule, k, load)}, deadlines=d{interval}{phase})"


def _baseline(schedule: Schedule, k: int, load: Load) -> str | None:
    """The fault-free reference of load ``k``, sent before any fault (``Phase.BASELINE``)."""
    if load.shape == "conversation":
        return (
            f"scenario.baseline(agents={load.count}, rounds={load.rounds}, words_per_round={load.words}, "
            f"max_tokens={load.max_tokens}, deadlines=d)"
        )
    if load.shape in ("streams", "requests"):
        return f"workload.background({_texts(schedule, k, load)}, deadlines=d).join()"
    return None


def _fault(strike: Strike) -> str:
    trigger = _TRIGGERS[strike.trigger].format(
        prefill=_near(strike.where, "prefill"), decode=_near(strike.where, "decode")
    )
    when = (f', stream="{strike.stream}"' if strike.stream else "") + trigger
    if strike.held:  # healed once decode gave the prefill up, or the heartbeat's bound passed
        when += f', until=scenario.logs("decode", "{PREFILL_LOST}"), hold_s=bounds.heartbeat_detect_s + bounds.slack_s'
    a, w = strike.action, strike.where
    if a == "terminate":
        return f'faults.terminate("{w}", drain_s=bounds.router_timeout_s{when})'
    if a == "latency":
        return f'faults.latency("{w}", {strike.amount}{when})'
    if a == "bandwidth":
        return f'faults.bandwidth("{w}", {strike.amount}{when})'
    return f'faults.{a}("{w}"{when})'


# After each heal, the next request waits until the stack serves again (smg takes a restarted
# engine back at its next health check): else the replies sent again to hold against the
# baseline meet "no available workers", and the next step's trigger waits on a worker smg does
# not route to yet. How long it took is judged (``recovers_after_each_heal``), not waited out.
_SERVING = "workload.probe_until_ok(within_s=bounds.recovery_s)"


def _heartbeat_judged(step: Step) -> bool:
    """Whether ``step`` holds a fault until decode gives its prefill up, and that is judged
    (``decode_gives_prefill_up``): a frozen prefill, a cut bootstrap link. Not a killed
    prefill: pdsim stops watching a prefill once its control link closes, with no room
    waiting on it, where SGLang watches every prefill it bootstrapped with until its
    heartbeat gives it up; pdsim's watch is to follow SGLang's first."""
    return bool(step.strike and step.strike.held and step.strike.action != "kill")


def _miss_s(strike: Strike) -> float:
    """How long one of decode's heartbeats takes to fail behind ``strike``: its read timeout
    behind a link that swallows it or a frozen prefill, nothing where it is refused or reset."""
    return HEARTBEAT_READ_S if strike.action in ("blackhole", "freeze") else 0.0


def render(schedule: Schedule, *, note: str = "") -> str:
    """The scenario file of ``schedule``: its baselines, then each step's load started and
    its fault fired while the load runs (healed once the load has ended) and the same load
    sent again once healed and serving (a fault may fail every request it meets; the replies after it
    must still equal the baseline's), then the universal invariants judged
    (``chaos.explore.invariants``): after faults, recovery and quiet; after load alone,
    quiet and no timeout fired. A request the stack can never serve, with no fault in its
    way, is turned away within ``bounds.refuse_s``."""
    steps = schedule.steps
    baselines = [b for k, s in enumerate(steps, 1) if (b := _baseline(schedule, k, s.load))]
    # the steps that fault (a strike, or clients hanging up): each is a block healed before the next step
    blocks = sum(bool(s.strike) or s.load.shape == "impatient" for s in steps)
    faults = blocks > 0
    cut = cuts(s.strike for s in steps if s.strike)
    decodes_ended = tuple(
        dict.fromkeys(
            s.strike.where
            for s in steps
            if s.strike and s.strike.action in ends_serving() and s.strike.where.startswith("decode")
        )
    )
    # only the primary paths act: every release is theirs, none a backstop's
    primary_only = all(s.strike is None or primary_path(s.strike) for s in steps)
    body = ["d = deadlines(bounds)"]
    body.append(
        "judge_universal(scenario, d, "
        f"baseline={bool(baselines)}, "
        f"conversations={any(s.load.shape == 'conversation' and s.load.rounds > 1 for s in steps)}"
        + ((f', cut="{cut[0]}"' if len(cut) == 1 else f", cut={cut!r}") if cut else "")
        + (f", decodes_ended={decodes_ended!r}" if decodes_ended else "")
        + (", drained=True" if any(s.strike and s.strike.action == "terminate" for s in steps) else "")
        + (", primary_only=True" if primary_only else "")
        + (
            f", held={len(held)}, held_miss_s={min(_miss_s(s.strike) for s in held if s.strike):g}"
            if (held := [s for s in steps if _heartbeat_judged(s)])
            else ""
        )
        + (", every_heal=True" if blocks > 1 else "")
        + ")"
    )
    body += baselines
    run: list[str] = []
    for k, step in enumerate(steps, 1):
        if step.load.shape == "impatient":  # sent inside its block: the hang-ups are the fault
            run.append(f'with faults.by_clients("{step.load.count} streams hung up after {HANG_UP_AFTER} events"):')
            run.append(f"    {_send(schedule, k, step.load, faulted=True)}.join()")
            run.append(_SERVING)
            continue
        run.append(f"load{k} = {_send(schedule, k, step.load, faulted=step.strike is not None or not faults)}")
        if step.strike and not primary_only and primary_path(step.strike) and step.load.shape != "unservable":
            # this step's own requests met only a primary path, whatever the other steps struck
            run.append(f"scenario.judge(v.backstops_stay_idle(workload=load{k}.name))")
        if step.strike:
            run.append(f"with {_fault(step.strike)}:")
            run.append(f"    load{k}.join()")
            run.append(_SERVING)
            if _baseline(schedule, k, step.load):  # the same contexts once healed: replies to hold against the baseline
                run.append(f"{_send(schedule, k, step.load, faulted=False)}.join()")
        else:
            run.append(f"load{k}.join()")
            if step.load.shape == "unservable":  # no fault in its way: turned away at the door
                run.append(f"scenario.judge(v.unservable_turned_away(within_s=bounds.refuse_s, workload=load{k}.name))")
    if faults:
        body += [*run, f"settle_universal(scenario, bounds{', decode_ended=True' if decodes_ended else ''})"]
    else:  # the load is all the chaos there is: bracketed as the clients' own, as suites/test_overload.py does
        body += ['with faults.by_clients("load alone, no fault"):', *("    " + line for line in run)]
        body.append("quiet_universal(scenario, bounds)")
    doc = f"pd-chaos explore: seed {schedule.seed}, episode {schedule.episode}, target {schedule.target}."
    if note:
        doc += "\n\n" + textwrap.fill(note, 92)
    again = f" --topology {schedule.topology}" if schedule.topology != "1p1d" else ""
    doc += f"\n\nRun it again: pytest <this file> --target {schedule.target}{again}"
    return (
        f'"""{doc}\n"""\n\n'
        "import pytest\n\n"
        "from chaos import verdicts as v\n"
        "from chaos.explore.invariants import deadlines, judge_universal, quiet_universal, settle_universal\n"
        "from chaos.observe.history import Phase\n\n"
        f"SCHEDULE = {schedule.as_json()!r}  # the data explore drew: chaos.explore.schedule.Schedule.from_json\n\n\n"
        '@pytest.fixture(scope="module")\n'
        "def seed() -> int:\n"
        f"    return {schedule.seed}  # the workload's texts and conversations, as explore sent them\n\n\n"
        f"def {function_name(schedule)}(scenario, workload, faults, bounds):\n"
        + textwrap.indent("\n".join(body), "    ")
        + "\n"
    )
