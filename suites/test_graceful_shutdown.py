"""SIGTERM under load: one step of a rolling restart.

Bug class: a server that exits on SIGTERM with requests open, cutting streams without a
final event, or that keeps saying it is ready until its port goes dark, so its load
balancer sends it work to the last moment (smg #876, three-phase shutdown; Kubernetes
sends SIGTERM, then SIGKILL after the grace period). Fault model: SIGTERM to decode, then
to the router (smg), while long streams run through them (trigger: smg counts all of them at
decode); once the service has exited on its own, the stack starts it again. Verdicts: every
stream open at the SIGTERM finishes with ``[DONE]`` (no request the system accepted is
lost), the service's readiness (an engine's /health, smg's /readiness) answers non-200
before it stops answering, service comes back, nothing leaks. Prefill holds a request only
briefly; its SIGTERM is sent where it holds many, behind a full decode:
``test_overload.py::test_prefill_sigterm_drains_the_requests_it_holds``.
"""

from __future__ import annotations

import pytest

from chaos import verdicts as v
from chaos.observe.pipeline import ENGINE_QUEUES, ROUTER_INFLIGHT
from chaos.observe.records import Phase

pytestmark = [pytest.mark.fault("process"), pytest.mark.needs("process_control")]

STREAMS = 3
LONG_REPLY = 300  # tokens: 3 s of decoding on pdsim, so decode has them open when the signal comes


@pytest.mark.smoke
@pytest.mark.parametrize("service", ["decode", "router"])
def test_sigterm_drains_the_open_streams(scenario, workload, faults, bounds, service):
    patient = bounds.patient()
    scenario.watch_health(service)
    scenario.judge(
        v.outcomes_in(set(), phase=Phase.FAULT),  # each ends with [DONE] and all its tokens
        v.not_ready_before_gone(service),
    )
    bodies = [workload.chat(f"story {i}", max_tokens=LONG_REPLY, ignore_eos=True, stream=True) for i in range(STREAMS)]
    streams = workload.background(bodies, deadlines=patient)
    # the service may take as long as its streams need: a drain is bounded by the client's deadline
    with faults.terminate(service, drain_s=bounds.router_timeout_s, when=scenario.requests_at("decode") >= STREAMS):
        streams.join()
    scenario.require(v.open_at_fault(phase=Phase.FAULT, why=f"{service} had them when the SIGTERM came"))
    # a restarted router's gauges start afresh (a per-worker series appears with its first
    # request): the old process's leak went with it, and the new one has no baseline
    scenario.settle(ENGINE_QUEUES + (ROUTER_INFLIGHT if service != "router" else ()), within_s=bounds.quiet_s)
