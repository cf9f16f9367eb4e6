"""Where failed requests stuck: before the router, when it never saw them."""

from __future__ import annotations

from chaos.history import History, Outcome
from chaos.judge.clock import SAMPLE_TOLERANCE_S
from chaos.judge.declare import verdict
from chaos.judge.model import Finding, failed, passed, unknown

__all__ = ["stuck_before_router"]


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
        ops=stuck,
        stuck=len(during),
    )
