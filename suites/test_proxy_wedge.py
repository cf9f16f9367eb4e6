"""The proxy between clients and the router misbehaves.

Bug class: the incident behind pd-chaos: an agent harness whose HTTP calls had no timeout
hung behind a misbehaving proxy while the engines sat idle; hours went to server-side
theories. Fault model: Toxiproxy on the client_router link: ``timeout`` (a blackhole of
client-to-router bytes), ``limit_data`` (streams cut mid-way), ``reset_peer`` and the link
down. Verdicts: clients with deadlines end within them (time out, or get a connection
error), nothing hangs, keep-alive clients recover on new connections once healed, and the
history attributes the stuck requests to the proxy hop: the router never saw them.
"""

from __future__ import annotations

import pytest

from chaos import verdicts as v
from chaos.history import Outcome
from chaos.workloads import Deadlines
from suites.conftest import ENGINE_QUEUES, ROUTER_INFLIGHT, aftermath

pytestmark = [pytest.mark.fault("network"), pytest.mark.needs("proxied_client")]

CUT = {Outcome.CLIENT_TIMEOUT, Outcome.CONNECTION_ERROR, Outcome.TRUNCATED, Outcome.STALLED}


def _deadlines(bounds) -> Deadlines:
    return Deadlines(connect_s=1.0, read_s=bounds.slack_s * 2, stall_s=bounds.slack_s, total_s=bounds.slack_s * 4)


def test_blackholed_proxy_times_clients_out_before_the_router(stack, history, sampler, workload, faults, bounds):
    d = _deadlines(bounds)
    with faults.blackhole("client_router", stream="upstream"):
        workload.conversations(agents=4, rounds=2, deadlines=d, phase="fault").run()
    workload.conversations(agents=4, rounds=2, deadlines=d, phase="after").run()  # same agents' talk, new connections
    sampler.wait_quiet(ENGINE_QUEUES + ROUTER_INFLIGHT, within_s=bounds.slack_s + 1)
    v.expect(
        history,
        v.every_request_terminal(within_s=d.total_s + 1),
        v.outcomes_in(CUT),
        v.stuck_before_router(),
        v.no_leak(gauges=ENGINE_QUEUES + ROUTER_INFLIGHT, within_s=bounds.slack_s + 1, since="quiet"),
        v.recovers(within_s=bounds.recovery_s),
    )


@pytest.mark.parametrize("wedge", ["limit_data", "reset_peer", "down"])
def test_wedged_proxy_gives_errors_not_hangs(stack, history, sampler, workload, faults, bounds, wedge):
    d = _deadlines(bounds)
    fault = {
        "limit_data": lambda: faults.limit_data("client_router", 1500),  # cut mid-stream
        "reset_peer": lambda: faults.reset_peer("client_router"),
        "down": lambda: faults.down("client_router"),
    }[wedge]()
    with fault:
        workload.conversations(agents=4, rounds=2, max_tokens=40, deadlines=d, phase="fault").run()
    after = aftermath(workload, sampler, bounds, gauges=ENGINE_QUEUES + ROUTER_INFLIGHT, within_s=bounds.slack_s + 2)
    v.expect(
        history,
        v.every_request_terminal(within_s=d.total_s + 1),
        v.outcomes_in(CUT),
        *after,
    )
