"""Circuit breakers: a failure is charged to the worker that failed, and only to it.

Bug class: a request the client got wrong (a 4xx) charged to the engine that refused it, so
a healthy worker's circuit opens and every later request gets 503 (smg #2565, sglang
#31206). Fault model: the clients themselves send requests every engine must refuse (a
prompt far over any context length), more of them than the breaker's failure threshold.
Verdicts: each is refused with a 4xx, smg charges neither worker a failure and neither
worker's circuit opens (a circuit half-open from an earlier test's fault may stay so), and
a good request right after them is served. (Every scenario that settles judges the same
charge verdict: ``Scenario.settle``.)

And an engine's own failure is charged to that engine alone: decode aborting the plain
(non-streaming) requests it holds must not charge prefill. smg 1.13.0 does: it records every
PD attempt's status on both workers (``pd_router.rs``, ``execute_dual_dispatch``:
``prefill.record_outcome(..); decode.record_outcome(..)``), and a plain request's decode
failure is the attempt's 500 (a stream's comes after its 200, so streams are not charged).
Found by ``pdchaos explore`` (embedded, seed 1, episode 8), promoted here.
"""

from __future__ import annotations

from typing import Collection

import pytest

from chaos import verdicts as v
from chaos.clients.workloads import OVER_ANY_CONTEXT
from chaos.judge.declare import verdict
from chaos.judge.model import Finding, nothing_at_stake, passed
from chaos.judge.ops import completed, label, naming, none_completed
from chaos.observe.history import History
from chaos.observe.pipeline import CIRCUIT_TRANSITIONS, ENGINE_QUEUES, ROUTER_INFLIGHT
from chaos.observe.records import Phase

pytestmark = [pytest.mark.fault("client")]

SMG_CHARGES_BOTH_ON_5XX = (
    "every PD attempt's 5xx is charged to both workers' circuit breakers: decode aborting plain requests "
    "raises smg_worker_cb_outcomes_total{outcome=failure} of the prefill worker, which no fault struck"
)
PLAIN = 6  # plain requests decode holds when it aborts them
# words: prefill is still forwarding some of the prompts when decode holds them all, on every
# target (as suites/test_engine_abort.py), and the replies are long enough that those whose KV
# has come are still being generated
LONG_PROMPT = 3000
BAD_REQUESTS = 12  # above smg's default breaker threshold


def _shown(allowed: Collection[int]) -> str:
    return f"{min(allowed)}-{max(allowed)}" if isinstance(allowed, range) else ",".join(str(a) for a in sorted(allowed))


@verdict(lambda allowed, phase, why, **_: f"statuses_in({_shown(allowed)}, {Phase(phase).value}: {why})")
def statuses_in(h: History, allowed: Collection[int], *, phase: Phase, why: str) -> Finding:
    """Every request of ``phase`` was answered with an HTTP status in ``allowed``: e.g. a
    request the client got wrong is refused with a 4xx, never a 5xx (which charges the
    worker). A request with no status (it never got an answer) does not hold."""
    ops = completed(h, phase)
    if not ops:
        return nothing_at_stake(none_completed(phase))
    bad = [o for o in ops if o.complete.status not in allowed]
    if bad:
        return naming(
            bad,
            len(ops),
            f"outside {_shown(allowed)}",
            lambda o: f"{label(o)} got {o.complete.status} ({o.outcome.value}) {o.complete.error[:100]}",
            shown=3,
            statuses=sorted({str(o.complete.status) for o in bad}),
        )
    answered = sorted({str(o.complete.status) for o in ops})
    return passed(f"all {len(ops)} answered {', '.join(answered)}", stake=len(ops), statuses=answered, of=len(ops))


def test_client_errors_never_open_a_circuit(scenario, sampler, workload, faults):
    scenario.judge(
        statuses_in(range(400, 500), phase=Phase.FAULT, why="the client's error"),
        v.statuses_tell_the_truth(),
        v.charged_only_where_struck(scenario.workers()),
        *(
            v.counter_never_rises(scenario.at_worker(CIRCUIT_TRANSITIONS, worker, "open"), why="only clients erred")
            for worker in scenario.workers()
        ),
        v.outcomes_in(set(), phase=Phase.AFTER),
    )
    too_long = workload.chat("word " * OVER_ANY_CONTEXT, max_tokens=2)
    with faults.by_clients(f"{BAD_REQUESTS} requests over the context length"):
        for _ in range(BAD_REQUESTS):
            workload.request("/v1/chat/completions", too_long, invalid="over any context")
    workload.request("/v1/chat/completions", workload.chat("a good request", max_tokens=2))
    sampler.wait_for_sample(1.0)  # the breakers' state as of after the last request


@pytest.mark.known_issue(
    "charged_only_where_struck",
    component="smg",
    version="1.13.0",
    behaviour=SMG_CHARGES_BOTH_ON_5XX,
    evidence={"unstruck": "prefill", "struck": ["decode"]},
)
def test_decode_aborting_plain_requests_charges_only_decode(scenario, workload, faults, bounds):
    d = bounds.patient(stall_s=bounds.recovery_s)
    scenario.judge(v.every_request_terminal(within_s=d.ends_within_s), v.failed_requests_are_clean())
    plain = workload.background(
        [
            workload.chat(f"plain {i} " + "word " * LONG_PROMPT, max_tokens=64, ignore_eos=True, stream=False)
            for i in range(PLAIN)
        ],
        deadlines=d,
    )
    with faults.abort_all("decode", when=scenario.requests_at("decode") >= PLAIN):
        plain.join()
    scenario.require(
        v.open_at_fault(
            phase=Phase.FAULT, why="decode held every request, waiting for its KV or decoding, when it aborted them"
        )
    )
    scenario.settle(ENGINE_QUEUES + ROUTER_INFLIGHT, within_s=bounds.quiet_s)
