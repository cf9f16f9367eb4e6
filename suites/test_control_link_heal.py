"""Decode's link to prefill wedges long enough to be declared lost, then heals.

Bug class: a connection decode lost is never made again, so decode serves nothing until it
is restarted, while its /health says 200 all along (ZeroMQ reconnect disabled on the cached
PD sockets, sglang PR #29570, restored by #31025, #31306, #32263; decode stalled until
restarted, #33789; a control-path failure invisible to health checks, #32652, #31144).
Fault model: Toxiproxy blackholes the bootstrap link (route info and heartbeats) until
decode's heartbeat declares the prefill lost (or its bound has passed); then the link heals.
Verdicts: decode gives the prefill up within its heartbeat's window, no sooner than its
configured misses allow and no later than its bound (a heartbeat that never fires is that
verdict failing, not a rig error); the first requests after the heal succeed with their
baseline replies, without a restart; no request fails while decode's /health says 200;
nothing leaks.
"""

from __future__ import annotations

import pytest

from chaos import verdicts as v
from chaos.observe.pipeline import ENGINE_QUEUES, PREFILL_LOST, ROUTER_INFLIGHT
from chaos.observe.records import Phase
from chaos.targets.stack import HEARTBEAT_READ_S

pytestmark = [pytest.mark.fault("network"), pytest.mark.needs("proxied_bootstrap")]

CONVERSATION = dict(agents=2, rounds=1)


def test_decode_serves_again_once_its_link_to_prefill_heals(scenario, workload, faults, bounds):
    scenario.baseline(**CONVERSATION)
    scenario.watch_health("decode")
    scenario.judge(
        # each missed heartbeat, behind the blackhole, fails by its read timeout
        v.decode_gives_prefill_up(held=1, no_sooner_s=bounds.heartbeat_no_sooner_s(HEARTBEAT_READ_S)),
        v.outcomes_in(set(), phase=Phase.AFTER),
        v.replies_match_baseline(),
        v.health_tells_truth("decode", phase=Phase.AFTER),
    )
    # held until decode gives the prefill up, or its bound and the slack have passed
    lost = scenario.logs("decode", PREFILL_LOST)
    with faults.blackhole(
        "bootstrap", stream="upstream", until=lost, hold_s=bounds.heartbeat_detect_s + bounds.slack_s
    ):
        pass
    workload.conversations(**CONVERSATION).run()
    scenario.settle(ENGINE_QUEUES + ROUTER_INFLIGHT, within_s=bounds.quiet_s)
