"""The PD handshake stalls: decode's metadata never reaches prefill, or reaches it slowly.

Bug class: a transfer backend whose prefill bootstrap timeout was a no-op (NIXL before
sglang PR #34692), leaving requests queued forever behind a stalled handshake. Fault model:
a Toxiproxy ``timeout`` toxic (blackhole) or ``latency`` on the control link, the path of
SGLang's per-request handshake (ZMQ in SGLang, TCP in pdsim). Verdicts: the bootstrap
timeout fires within its bound, clients see clean errors, nothing stays queued, the healed
link recovers; a slow handshake is not taken for a stuck one.
"""

from __future__ import annotations

import pytest

from chaos import verdicts as v
from chaos.clients.client import Deadlines
from chaos.observe.pipeline import ENGINE_QUEUES, PREFILL_BOOTSTRAP_FAILED, ROUTER_INFLIGHT

pytestmark = [pytest.mark.fault("network"), pytest.mark.needs("control_link")]


@pytest.mark.smoke
def test_handshake_blackholed(scenario, workload, faults, bounds):
    deadlines = Deadlines(
        read_s=bounds.waiting_s + 2 * bounds.slack_s,
        stall_s=bounds.waiting_s + bounds.slack_s,
        total_s=bounds.router_timeout_s,
    )
    scenario.judge(
        v.every_request_terminal(within_s=deadlines.ends_within_s),
        v.failed_requests_are_clean(within_s=bounds.waiting_s + bounds.slack_s),
        v.statuses_tell_the_truth(),  # released by a timeout: told as one
        v.watchdog_fired(
            "prefill bootstrap",
            PREFILL_BOOTSTRAP_FAILED,
            timeout_s=bounds.bootstrap_s,
            slack_s=bounds.slack_s,
            since=v.Since.REQUEST,
        ),
    )
    with faults.blackhole("control", stream="upstream"):
        workload.conversations(agents=3, rounds=1, deadlines=deadlines).run()
    scenario.settle(ENGINE_QUEUES + ROUTER_INFLIGHT, within_s=bounds.quiet_s)


@pytest.mark.needs("link_delay")
def test_handshake_slowed_is_not_stuck(scenario, workload, faults, bounds):
    scenario.baseline(agents=2, rounds=2)
    scenario.judge(
        v.every_request_terminal(within_s=bounds.bootstrap_s + bounds.slack_s),
        v.outcomes_in(set()),
        v.counter_never_rises(PREFILL_BOOTSTRAP_FAILED, why="slow is not stuck"),
        v.replies_match_baseline(),
    )
    with faults.latency("control", 400, stream="upstream"):  # well under the bootstrap timeout
        workload.conversations(agents=2, rounds=2).run()
    # half the delay: a handshake overlaps with what the request waits for besides it
    scenario.require(v.requests_slowed(by_s=0.2, why="each request's handshake crossed the delayed link"))
