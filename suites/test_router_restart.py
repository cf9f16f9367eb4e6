"""The router (smg) is killed and restarted under load.

Bug class: clients that hang when the gateway dies under them instead of getting an error,
and engines left holding the dead router's requests. Fault model: SIGKILL of smg while it
has requests in flight (triggered by its in-flight gauge), then a restart. Verdicts:
clients get errors, not hangs (connection errors or cut streams, never a stall or a
timeout), engines free everything, and service recovers.
"""

from __future__ import annotations

import pytest

from chaos import verdicts as v
from chaos.observe.pipeline import ENGINE_QUEUES, ROUTER_INFLIGHT
from chaos.observe.records import Outcome
from chaos.observe.triggers import gauge

pytestmark = [pytest.mark.fault("process"), pytest.mark.needs("process_control")]


@pytest.mark.smoke
def test_router_killed_under_load(scenario, workload, faults, bounds):
    deadlines = bounds.patient(stall_s=bounds.slack_s * 2)
    scenario.judge(
        v.every_request_terminal(within_s=deadlines.ends_within_s),
        v.outcomes_in({Outcome.CONNECTION_ERROR, Outcome.TRUNCATED, Outcome.CLEAN_ERROR}),
    )
    convo = workload.conversations(
        agents=4, rounds=3, words_per_round=200, max_tokens=60, deadlines=deadlines, retries=8
    ).start()
    with faults.kill("router", when=gauge(*ROUTER_INFLIGHT[0]) > 0):
        pass  # leaving the block restarts smg and waits for its readiness
    convo.join()
    scenario.settle(ENGINE_QUEUES, within_s=bounds.quiet_s)  # the restarted router's own gauges start afresh
