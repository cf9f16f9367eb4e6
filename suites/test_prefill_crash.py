"""Prefill dies, freezes or restarts while decode keeps running.

Bug classes: decode that never notices a dead prefill (NIXL without a heartbeat, #10365);
stale cached prefill route info after prefill is replaced (#33789, PRs #34289/#36029).
Fault model: SIGKILL of prefill while decode waits for KV (triggered by decode's transfer
queue), SIGSTOP before the requests arrive (so decode waits for KV on any engine, however
fast), and a restart. Verdicts: decode lets go of the waiting rooms within its
heartbeat's detection bound (before the waiting timeout could), failures are clean, decode
picks up the restarted prefill, nothing leaks. The KV pages decode set aside for a room
are judged in the same window as the room: judged only at the settle, after prefill's
restart (20 to 45 s on a CPU), they would race SGLang's 30 s deferred release.

Which mechanism frees the rooms is the engine's business: pdsim's heartbeat does; behind
smg 1.13.0, real SGLang's decode is told sooner, because smg aborts both legs as soon as
the prefill leg fails and SGLang aborts a request whose client went away. What a user
needs is that decode holds nothing for a dead prefill past the heartbeat's bound.
"""

from __future__ import annotations

import pytest

from chaos import verdicts as v
from chaos.observe.pipeline import DECODE_TRANSFER_QUEUE, ENGINE_QUEUES, KV_IN_USE, ROUTER_INFLIGHT
from chaos.observe.records import Phase
from chaos.observe.triggers import gauge, quiet
from chaos.upstream import deferred_kv_release

# what decode holds for a room: its place in each queue, and the KV pages set aside for it
DECODE_HOLDS = tuple(q for q in ENGINE_QUEUES + KV_IN_USE if q.source == "decode")

pytestmark = [pytest.mark.fault("process"), pytest.mark.needs("process_control")]

LONG = dict(agents=3, rounds=1, words_per_round=500)  # forwards long enough to be killed in
HEARTBEAT_SLACK_S = 1.0  # the heartbeat must beat the waiting timeout, which is 2 s later


@pytest.mark.needs(
    "live_queue_gauges", "transfer_window"
)  # its trigger acts inside the transfer; its oracle is decode's queues
@pytest.mark.smoke
@deferred_kv_release
def test_prefill_killed_while_decode_waits(scenario, workload, faults, bounds):
    scenario.judge(
        v.every_request_terminal(within_s=bounds.router_timeout_s),
        v.failed_requests_are_clean(),
        # at the latest, rooms fail after `misses` failed heartbeats, `interval` apart: before the waiting timeout
        v.no_leak(
            gauges=DECODE_HOLDS,
            within_s=bounds.heartbeat_interval_s * bounds.heartbeat_max_failure + HEARTBEAT_SLACK_S,
            since=v.Since.FAULT,
        ),
    )
    with faults.transfer_window():  # a real engine's KV crawls, so decode waits for it long enough to see
        convo = workload.conversations(**LONG, deadlines=bounds.past_timeout(bounds.waiting_s)).start()
        with faults.kill(
            "prefill",
            when=gauge(*DECODE_TRANSFER_QUEUE) > 0,
            until=quiet([DECODE_TRANSFER_QUEUE]),
            hold_s=bounds.heartbeat_detect_s,
        ):
            pass  # prefill stays down until decode let go of the rooms (or the detection bound passed)
    convo.join()
    scenario.require(v.requests_affected(phase=Phase.FAULT, why="decode waiting for KV when prefill died"))
    scenario.settle(ENGINE_QUEUES + ROUTER_INFLIGHT, within_s=bounds.quiet_s)


@pytest.mark.known_issue(
    "failed_requests_are_clean",
    component="smg",
    version="1.13.0",
    behaviour="a streaming PD request gets no response headers while its prefill leg hangs. With prefill "
    "frozen, decode fails the request by its waiting timeout (SGLang 0.5.23 and pdsim both log 'Decode transfer "
    "failed ... timed out after 6.0s in KVPoll.WaitingForInput' and end the decode leg with a status-500 abort), "
    "but smg forwards nothing: clients wait until their own deadline (smg logs status 499 'client closed the "
    "connection before the response') or smg's --request-timeout-secs. Evidence: failed_requests_are_clean lists "
    "client_timeout with no first byte for every agent, on pdsim and on real SGLang alike.",
    evidence={"outcomes": ["client_timeout"], "first_byte": [False]},
)
def test_prefill_frozen_then_thawed(scenario, workload, faults, bounds):
    # Prefill is frozen first, so decode is sure to wait for KV that cannot come, on any
    # engine however fast; smg counting every request at the decode worker is the premise.
    scenario.judge(
        v.every_request_terminal(within_s=bounds.router_timeout_s),
        v.failed_requests_are_clean(within_s=bounds.waiting_s + bounds.slack_s),
    )
    at_decode = scenario.requests_at("decode")
    with faults.freeze(
        "prefill", until=quiet([(at_decode.source, at_decode.metric)]), hold_s=bounds.waiting_s + 2 * bounds.slack_s
    ):
        convo = workload.conversations(**LONG, deadlines=bounds.past_timeout(bounds.waiting_s)).start()
        faults.wait(at_decode >= LONG["agents"], deadline_s=bounds.recovery_s)
    convo.join()
    scenario.require(
        v.requests_affected(
            phase=Phase.FAULT, why="decode waiting for KV while prefill is frozen past the waiting timeout"
        )
    )
    scenario.settle(ENGINE_QUEUES + ROUTER_INFLIGHT, within_s=bounds.bootstrap_s + bounds.slack_s)


def test_decode_picks_up_a_restarted_prefill(scenario, workload, faults, bounds):
    scenario.baseline(agents=2, rounds=2)
    scenario.judge(
        v.recovers(within_s=bounds.recovery_s), v.outcomes_in(set(), phase=Phase.AFTER), v.replies_match_baseline()
    )
    with faults.restart("prefill"):  # on pdsim quicker than the heartbeat can notice
        pass
    # smg saw prefill down (its health checks run every 2 s) and routes to it again once it
    # answers twice: the conversations start once the router serves, within the recovery bound
    workload.probe_until_ok(within_s=bounds.recovery_s)
    workload.conversations(agents=2, rounds=2, deadlines=bounds.past_timeout(bounds.waiting_s)).run()
