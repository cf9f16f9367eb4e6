"""SGLang's own failure hooks: every room they fail must fail its request cleanly.

Bug class: a transfer that fails at a moment no link fault can pick (a room still
bootstrapping, one waiting for its forward, one whose KV is in flight or has just landed),
leaving a request that hangs, an engine that crashes, or a slot and its KV held for good.
SGLang tests its PD code with hooks for this (``srt/environ.py``); pd-chaos runs them as a
fault. Fault model: the engines start with ``SGLANG_TEST_DISAGG_FAILURE_PROB`` (each poll of
a room, in every PD queue of both engines, reads Failed at that chance) and, with the KV
checksum on, ``SGLANG_TEST_DISAGG_KV_CHECKSUM_MISMATCH_PROB`` (decode's check of a request's
KV fails at that chance): a stack of the module's own, since the hooks last as long as the
engines. A failure the hooks plant is the engine's alone, never told to its peer, so the
peer's own timeout may be what ends its leg. Premises: the hooks failed some requests and
some were served. Verdicts: every request ends within decode's waiting timeout and its
slacks, each failure is clean and its status says whose it was, every service keeps its
process, nothing is held once it is over, and the stack serves again.
"""

from __future__ import annotations

import pytest

from chaos import verdicts as v
from chaos.judge.declare import premise
from chaos.judge.model import Finding, met, unmet
from chaos.judge.ops import completed, none_completed
from chaos.observe.history import History
from chaos.observe.pipeline import ENGINE_QUEUES, KV_IN_USE, ROUTER_INFLIGHT
from chaos.observe.records import Outcome, Phase
from chaos.run.skips import SkipKind, skip
from chaos.targets.stack import FailureHooks

pytestmark = [pytest.mark.fault("engine")]

# A room waits tens of scheduler steps in each engine's queues, each step a poll; a checksum
# mismatch is drawn once an attempt. At 0.2 % a poll, SGLang on CPU failed 6 of 24 requests
# (two runs); pdsim, whose rooms wait longer and are polled every 5 ms, 9 to 13 of 24 (six
# runs; 15 to 23 at 0.5 %, where one run served a single request): some fail, some are served.
HOOKS = FailureHooks(poll_failure_prob=0.002, kv_checksum_mismatch_prob=0.25)
# The hooks fail requests for as long as the engines run, so smg's circuit breakers would
# open on the first 10 failures in a row and, after the requests, let one probe a worker
# every --cb-timeout-duration-secs, failed at the hooks' chance, and reopen: whether the
# stack served again within the recovery bound would be a draw (CI at 3f12f0b: on pdsim,
# 503 "all circuits open" for all of it). The breakers have a suite of their own; here they
# are out of reach, as smg's --disable-circuit-breaker puts them.
NO_BREAKER = 1_000_000
REQUESTS = 24
SERVICES = ("prefill", "decode", "router")
GAUGES = ENGINE_QUEUES + KV_IN_USE + ROUTER_INFLIGHT


@premise(lambda phase, **_: f"some_served({Phase(phase).value})")
def some_served(h: History, *, phase: Phase, why: str) -> Finding:
    """Premise: at least one request of ``phase`` was served. Hooks meant to fail some
    requests at random that failed every one said nothing of how the stack serves the rest
    beside its failures."""
    ops = completed(h, phase)
    if not ops:
        return unmet(none_completed(phase))
    served = [o for o in ops if o.outcome is Outcome.OK]
    if not served:
        return unmet(
            f"none of {len(ops)} was served ({why})",
            ops=[o.invoke.op for o in ops],
            ended=sorted({o.outcome.value for o in ops}),
        )
    return met(f"{len(served)} of {len(ops)} served", served=len(served), requests=len(ops))


@pytest.fixture(scope="module")
def stack(stack_factory):
    """A stack of the module's own, its engines started with the hooks and the KV checksum,
    smg's circuit breakers out of reach."""
    if not stack_factory.choice.sets_engine_options:
        skip(SkipKind.TARGET, f"target {stack_factory.choice.name} cannot start engines with SGLang's failure hooks")
    with stack_factory.own(hooks=HOOKS, kv_checksum=True, router_cb_failure_threshold=NO_BREAKER) as target:
        yield target


def test_rooms_the_hooks_fail_fail_cleanly(scenario, workload, faults, bounds):
    """Requests, streamed and plain, sent one after another while the hooks fail rooms at
    random on both engines: each ends in time, served or failed cleanly with a status that
    says so; no service restarts; every queue, slot and KV page is given back."""
    d = bounds.past_timeout(bounds.waiting_s, slacks=2)
    scenario.watch_processes(*SERVICES)
    scenario.judge(
        v.every_request_terminal(within_s=d.ends_within_s),
        v.outcomes_in({Outcome.CLEAN_ERROR}, phase=Phase.FAULT),
        v.failed_requests_are_clean(phase=Phase.FAULT),
        v.statuses_tell_the_truth(),
        v.stayed_up(SERVICES),
    )
    bodies = [
        workload.chat(f"hooked {i} " + "word " * 200, max_tokens=16, ignore_eos=True, stream=i % 2 == 0)
        for i in range(REQUESTS)
    ]
    with faults.engine_hooks():
        workload.background(bodies, deadlines=d, interval_s=0.1).join()
    scenario.require(
        v.requests_affected(phase=Phase.FAULT, why="the hooks failed rooms"),
        some_served(phase=Phase.FAULT, why="the hooks left requests to serve"),
    )
    scenario.settle(GAUGES, within_s=bounds.quiet_s)
