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
from chaos.clients.client import Deadlines
from chaos.judge.clock import SAMPLE_TOLERANCE_S
from chaos.judge.declare import verdict
from chaos.judge.model import Finding, failed, passed, unknown
from chaos.observe.history import History
from chaos.observe.pipeline import ENGINE_QUEUES, ROUTER_INFLIGHT
from chaos.observe.records import Outcome

pytestmark = [pytest.mark.fault("network"), pytest.mark.needs("proxied_client")]

CUT = {Outcome.CLIENT_TIMEOUT, Outcome.CONNECTION_ERROR, Outcome.TRUNCATED, Outcome.STALLED}


@verdict(lambda **_: "stuck_before_router")
def stuck_before_router(h: History, *, router_counter: str = "smg_http_requests_total:serving") -> Finding:
    """Attribution: requests sent while the fault was active never reached the router (its
    serving-request counter did not move; health checks do not count), so they were stuck in
    the client or a proxy before it."""
    inject, heal = h.first_fault_t(), h.last_heal_t()
    if inject is None or heal is None:
        return unknown("no healed fault in the history")
    during = [o for o in h.ops() if inject <= o.invoke.t <= heal and o.outcome is not Outcome.OK]
    series = h.series("router", router_counter)
    # the counter as of the first sample after the fault (a request that completed just
    # before the fault may be counted a sample late), against its maximum until the heal
    before = [v for t, v in series if inject + SAMPLE_TOLERANCE_S <= t <= heal][:1]
    inside = [v for t, v in series if inject + SAMPLE_TOLERANCE_S < t <= heal]
    if not during or not before or not inside:
        return unknown("no failed request or no router samples inside the fault window")
    grew = max(inside) - before[-1]
    stuck = [o.invoke.op for o in during]
    if grew > 0:
        return failed(
            f"the router counted {grew:g} requests while {len(during)} client requests were stuck: not (only) the proxy hop",
            ops=stuck,
            router_counted=grew,
            stuck=len(during),
        )
    return passed(
        f"{len(during)} stuck requests; the router saw none of them: stuck before the router",
        stake=len(during),
        ops=stuck,
        stuck=len(during),
    )


def _deadlines(bounds) -> Deadlines:
    return Deadlines(connect_s=1.0, read_s=bounds.slack_s * 2, stall_s=bounds.slack_s, total_s=bounds.slack_s * 4)


def test_blackholed_proxy_times_clients_out_before_the_router(scenario, workload, faults, bounds):
    d = _deadlines(bounds)
    scenario.judge(v.every_request_terminal(within_s=d.ends_within_s), v.outcomes_in(CUT), stuck_before_router())
    with faults.blackhole("client_router", stream="upstream"):
        workload.conversations(agents=4, rounds=2, deadlines=d).run()
    workload.conversations(agents=4, rounds=2, deadlines=d).run()  # same agents' talk, new connections
    scenario.settle(ENGINE_QUEUES + ROUTER_INFLIGHT, within_s=bounds.quiet_s)


@pytest.mark.smoke
@pytest.mark.parametrize("wedge", ["limit_data", "reset_peer", "down"])
def test_wedged_proxy_gives_errors_not_hangs(scenario, workload, faults, bounds, wedge):
    d = _deadlines(bounds)
    scenario.judge(v.every_request_terminal(within_s=d.ends_within_s), v.outcomes_in(CUT))
    fault = {
        "limit_data": lambda: faults.limit_data("client_router", 1500),  # cut mid-stream
        "reset_peer": lambda: faults.reset_peer("client_router"),
        "down": lambda: faults.down("client_router"),
    }[wedge]()
    with fault:
        workload.conversations(agents=4, rounds=2, max_tokens=40, deadlines=d).run()
    scenario.settle(ENGINE_QUEUES + ROUTER_INFLIGHT, within_s=bounds.abort_s)
