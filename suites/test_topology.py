"""One worker of two struck while its twin serves: in 1P2D a decode, in 2P1D a prefill.

Bug class: faults that spread past the worker they struck. A router that keeps sending to a
dead decode, or never takes it back once it is healthy (smg's health checks and breakers);
a decode whose heartbeat, losing one prefill, fails the rooms of every prefill; a shared
prefill whose transfers to a dead decode hold up those to the live one. None of this can
happen with one engine of each kind. Fault model: a stack of the module's own, in each
topology, with smg's round-robin policy (so each worker's share of the requests is known);
streams sent every quarter second throughout; SIGKILL of the second engine of a kind while
it and its twin both hold requests, held until smg's health checks must have dropped it and
a few seconds more, then a restart. A prefill struck, one long prompt sent at once keeps a
room of the twin's waiting on decode until decode's heartbeat has given the dead one up.
Verdicts: every request its twin served (in flight at the kill, or sent while the worker
was down) succeeds; every failure is clean; requests sent once the health checks' bound
has passed all go to the twin and succeed; the restarted worker serves again within the
bound of smg's good checks; nothing stays queued on any engine or in the router.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from chaos import verdicts as v
from chaos.observe.pipeline import ENGINE_QUEUES, PREFILL_LOST, ROUTER_INFLIGHT, on_engines
from chaos.observe.triggers import Condition
from chaos.system.topology import Topology, kind_of

pytestmark = [pytest.mark.fault("process"), pytest.mark.needs("process_control")]

INTERVAL_S = 0.25  # one stream sent every this long, throughout
WORDS = 100  # rooms wait on decode while prefill computes them, and one decode absorbs them all
MAX_TOKENS = 64  # streams long enough that each decode holds some at any moment
# a prompt whose forward (pdsim: 1 ms a token, about 1.1 tokens a word: 4.3 s) outlasts decode's
# heartbeat giving a dead prefill up (its second miss, 2 s after the first: within 4 s of the
# kill), while a short stream queued behind it still gets its KV inside decode's 6 s waiting
# timeout (at 4500 words one did not: 6.0 s)
LONG_WORDS = 3800
BEFORE_S = 4.0  # streams sent before the strike: the trigger finds both workers busy within it
AFTER_S = 3.0  # streams sent past each bound: what the verdicts after it judge


@dataclass(frozen=True)
class Shape:
    """A topology, and which of its engines is struck (the second of the kind it has two of)."""

    topology: Topology
    struck: str

    @property
    def twin(self) -> str:
        return kind_of(self.struck)

    def __str__(self) -> str:
        return f"{self.topology}-{self.struck}"


SHAPES = [Shape(Topology(1, 2), "decode2"), Shape(Topology(2, 1), "prefill2")]


@pytest.fixture(scope="module", params=SHAPES, ids=str)
def shape(request: pytest.FixtureRequest) -> Shape:
    return request.param


@pytest.fixture(scope="module")
def stack(stack_factory, shape):
    """A stack of the module's own in the shape's topology, smg routing round robin."""
    with stack_factory.own(topology=shape.topology, router_policy="round_robin") as target:
        yield target


def both_busy(scenario, shape: Shape) -> Condition:
    """A stream the struck engine received and one its twin received are both open, by the
    engines' own logs (prompt on any engine: a real prefill holds a prompt for milliseconds),
    so that the fault meets requests of both; for a prefill, decode then holds rooms of both
    for its heartbeat to tell apart when it gives the struck one up."""
    return scenario.streaming_through(shape.struck) & scenario.streaming_through(shape.twin)


def streams(workload, label: str, seconds: float) -> list[dict]:
    n = max(1, round(seconds / INTERVAL_S))
    return [
        workload.chat(f"{label} {i} " + "word " * WORDS, max_tokens=MAX_TOKENS, ignore_eos=True, stream=True)
        for i in range(n)
    ]


SMG_CHARGES_THE_TWIN = (
    "every failed PD attempt is charged to both workers' circuit breakers, whichever leg failed: while "
    "decode2 is dead the shared prefill is charged with its failures, while prefill2 is dead the shared "
    "decode is (smg_worker_cb_outcomes_total{outcome=failure} of the unstruck worker rises with the "
    "struck one's, up to the breaker's threshold of 10)"
)


@pytest.mark.known_issue(
    "charged_only_where_struck",
    component="smg",
    version="1.13.0",
    behaviour=SMG_CHARGES_THE_TWIN,
    evidence={"unstruck": ["prefill", "decode"], "struck": ["decode2", "prefill2"]},
)
def test_one_worker_killed_while_its_twin_serves(scenario, workload, faults, bounds, shape, stack):
    """The twin's requests all succeed, the router routes around the dead worker within its
    health checks' bound and takes it back after its restart, and nothing stays queued."""
    struck = shape.struck
    drops_s = bounds.drops_worker_s(0.0)  # a dead worker's checks are refused at once
    deadlines = bounds.patient()
    scenario.judge(
        v.every_request_terminal(within_s=deadlines.ends_within_s),
        v.failed_requests_are_clean(),
        v.healthy_workers_unaffected(struck=struck),
        v.routed_around(struck=struck, within_s=drops_s),
        v.taken_back(struck=struck, within_s=bounds.takes_back_s),
    )
    before = workload.background(streams(workload, "before", BEFORE_S), deadlines=deadlines, interval_s=INTERVAL_S)
    with faults.kill(struck, when=both_busy(scenario, shape)):
        if shape.twin == "prefill":  # decode gives the dead prefill up while a room of the twin's waits
            given_up = scenario.logs("decode", PREFILL_LOST)
            long = workload.background(
                [workload.chat("long " + "word " * LONG_WORDS, max_tokens=8, stream=True)], deadlines=deadlines
            )
            faults.wait(given_up, deadline_s=bounds.heartbeat_detect_s + bounds.slack_s)
            long.join()
        # held down while streams keep coming, past the health checks' bound
        workload.background(
            streams(workload, "down", drops_s + AFTER_S), deadlines=deadlines, interval_s=INTERVAL_S
        ).join()
    workload.background(
        streams(workload, "back", bounds.takes_back_s + AFTER_S), deadlines=deadlines, interval_s=INTERVAL_S
    ).join()
    before.join()
    engines = stack.info.topology.engines
    scenario.settle(on_engines(ENGINE_QUEUES, engines) + ROUTER_INFLIGHT, within_s=bounds.quiet_s)
