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
from chaos.history import Outcome
from chaos.triggers import gauge
from chaos.workloads import Deadlines
from suites.conftest import ENGINE_QUEUES

pytestmark = [pytest.mark.fault("process"), pytest.mark.needs("process_control")]


def test_router_killed_under_load(stack, history, sampler, workload, faults, bounds):
    deadlines = Deadlines(read_s=bounds.router_timeout_s, stall_s=bounds.slack_s * 2, total_s=bounds.router_timeout_s)
    convo = workload.conversations(agents=4, rounds=3, words_per_round=200, max_tokens=60, deadlines=deadlines, retries=8, phase="fault").start()
    with faults.kill("router", when=gauge("router", "smg_worker_requests_active") > 0):
        pass  # leaving the block restarts smg and waits for its readiness
    convo.join()
    workload.probe_until_ok(within_s=bounds.recovery_s)
    sampler.wait_quiet(ENGINE_QUEUES, within_s=bounds.slack_s + 1)
    v.expect(
        history,
        v.every_request_terminal(within_s=deadlines.total_s + 1),
        v.outcomes_in({Outcome.CONNECTION_ERROR, Outcome.TRUNCATED, Outcome.CLEAN_ERROR}),
        v.no_leak(gauges=ENGINE_QUEUES, within_s=bounds.slack_s + 1, since="quiet"),
        v.recovers(within_s=bounds.recovery_s),
    )
