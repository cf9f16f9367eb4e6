"""Circuit breakers: a failure is charged to the worker that failed, and only to it.

Bug class: a request the client got wrong (a 4xx) charged to the engine that refused it, so
a healthy worker's circuit opens and every later request gets 503 (smg #2565, sglang
#31206). Fault model: the clients themselves send requests every engine must refuse (a
prompt far over any context length), more of them than the breaker's failure threshold.
Verdicts: each is refused with a 4xx, smg charges neither worker a failure and neither
worker's circuit opens (a circuit half-open from an earlier test's fault may stay so), and
a good request right after them is served. (Every scenario that settles judges the same
charge verdict: ``Scenario.settle``.)
"""

from __future__ import annotations

import pytest

from chaos import verdicts as v
from chaos.history import Phase
from chaos.pipeline import CIRCUIT_TRANSITIONS

pytestmark = [pytest.mark.fault("client")]

OVER_ANY_CONTEXT = 70_000  # words: above the context of every model the targets serve (32k tokens at most)
BAD_REQUESTS = 12  # above smg's default breaker threshold


def test_client_errors_never_open_a_circuit(scenario, sampler, workload, faults):
    scenario.judge(
        v.statuses_in(range(400, 500), phase=Phase.FAULT, why="the client's error"),
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
            workload.request("/v1/chat/completions", too_long, phase=Phase.FAULT)
    workload.request("/v1/chat/completions", workload.chat("a good request", max_tokens=2), phase=Phase.AFTER)
    sampler.wait_for_sample(1.0)  # the breakers' state as of after the last request
