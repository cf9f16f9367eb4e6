"""A prefill restarted on new ports before decode's heartbeat gives it up: the first requests
after it is ready are served.

Bug class: a peer's address cached past the peer's life. SGLang 0.5.23's decode caches each
prefill's route, the per-rank address of its ZMQ control channel that the bootstrap server
gives, under the bootstrap address (``connection_pool`` in ``disaggregation/common/conn.py``)
and drops it only when its heartbeat gives that prefill up (``_handle_node_failure``). A
prefill that restarts behind the same bootstrap address picks new rank ports; where decode's
heartbeat did not give it up meanwhile (a restart quicker than the heartbeat's misses add up
to, or a bootstrap address that answers through it), decode keeps the old ones and every
later request fails (sglang#36029, fixed after 0.5.23: an entry is dropped on a failed send
or a waiting timeout and the route fetched again). ``test_prefill_crash`` restarts prefill
too, but on real SGLang the heartbeat gives it up long before it is back.

Fault model: a stack of the module's own whose decode's heartbeat tolerates misses for
longer than prefill takes to restart (2 s beats, 60 misses: 120 s); conversations served
first, so decode holds prefill's route; prefill restarted, picking its control port anew
(real SGLang picks its ZMQ port at each start; pdsim does in this stack, dialled directly,
``fixed_control_port`` off). Verdicts: a fresh request succeeds within the recovery
bound once prefill is back, and the conversations after it are served whole. Premises:
prefill's bootstrap server gives another rank port after the restart than before it, and
the restart was over before decode's heartbeat could give prefill up.
"""

from __future__ import annotations

import time

import pytest

from chaos import verdicts as v
from chaos.errors import PremiseNotMet
from chaos.observe.pipeline import ENGINE_QUEUES, ROUTER_INFLIGHT
from chaos.observe.records import Phase
from chaos.observe.triggers import Condition
from chaos.targets.bringup import rank_port
from chaos.targets.stack import Timeouts
from chaos.upstream import deferred_kv_release, sglang_known

pytestmark = [pytest.mark.fault("process"), pytest.mark.needs("process_control", "fresh_rank_ports")]

HEARTBEAT_S, MISSES = 2.0, 60  # decode gives a silent prefill up after 120 s: past any restart here


def rank_port_is_not(target, before: int) -> Condition:
    """Prefill's bootstrap server gives a rank port other than ``before``."""

    def check(sampler, since: float) -> tuple[bool, str]:
        now = rank_port(target.info.endpoints["prefill_bootstrap"])
        return now != before, f"rank port {now} (before the restart: {before})"

    return Condition(f"prefill's rank port is not {before}", check)


SGLANG_KEEPS_THE_OLD_ROUTE = (
    "decode keeps a prefill's cached route (its connection_pool entry, the rank ports the bootstrap server gave "
    "before the restart) until its heartbeat gives that prefill up; a prefill back on the same bootstrap address "
    "with new rank ports before then is never reached: every request fails at decode's waiting timeout ('timed "
    "out after 6.0s in KVPoll.WaitingForInput'), every probe too, for as long as the heartbeat answers "
    "(sglang#36029, fixed after 0.5.23). Real SGLang on CPU, 2026-12-07: rank port 38745, then 37931 after a "
    "27 s restart; 10 probes and 2 of 2 conversations failed, none served"
)


@pytest.fixture(scope="module")
def stack(stack_factory):
    """The session's settings, but a heartbeat that tolerates a prefill restart."""
    with stack_factory.own(
        timeouts=Timeouts(heartbeat_interval_s=HEARTBEAT_S, heartbeat_max_failure=MISSES), fixed_control_port=False
    ) as target:
        yield target


@sglang_known(
    "recovers",
    SGLANG_KEEPS_THE_OLD_ROUTE,
    evidence={"outcomes": ["clean_error", "client_timeout"]},
    lacking="stale_route_dropped",
)
@sglang_known(
    "outcomes_in", SGLANG_KEEPS_THE_OLD_ROUTE, evidence={"outcomes": ["clean_error"]}, lacking="stale_route_dropped"
)
# decode's waiting timeouts, charged where smg counts them (its plain requests' attempts): not strict
@sglang_known(
    "charged_only_where_struck",
    SGLANG_KEEPS_THE_OLD_ROUTE,
    evidence={"unstruck": "decode", "struck": ["prefill"]},
    lacking="stale_route_dropped",
    strict=False,
)
@deferred_kv_release  # decode's pages of each failed room, till its 30 s deferred release
def test_decode_serves_a_prefill_restarted_on_new_ports(scenario, workload, faults, bounds):
    """Conversations served, prefill restarted on new rank ports while decode still holds its
    route: once prefill is back a fresh request succeeds, and every conversation after it."""
    scenario.judge(v.recovers(within_s=bounds.recovery_s), v.outcomes_in(set(), phase=Phase.AFTER))
    workload.conversations(agents=2, rounds=2).run()  # decode fetches prefill's route and keeps it
    before = rank_port(scenario.target.info.endpoints["prefill_bootstrap"])
    began = time.monotonic()
    with faults.restart("prefill"):
        faults.wait(rank_port_is_not(scenario.target, before), deadline_s=bounds.recovery_s)
    took = time.monotonic() - began
    if took >= HEARTBEAT_S * MISSES:
        raise PremiseNotMet(f"prefill's restart took {took:.0f}s, past decode's heartbeat ({HEARTBEAT_S * MISSES:g}s)")
    workload.probe_until_ok(within_s=bounds.recovery_s)
    workload.conversations(agents=2, rounds=2, deadlines=bounds.past_timeout(bounds.waiting_s)).run()
    scenario.settle(ENGINE_QUEUES + ROUTER_INFLIGHT, within_s=bounds.quiet_s)
