"""What readiness probes said: a 200 means the service serves, and it says not ready
before it goes dark."""

from __future__ import annotations

from typing import Any

from chaos.judge.declare import verdict
from chaos.judge.model import Finding, failed, nothing_at_stake, passed, unknown
from chaos.judge.ops import completed, label, none_completed
from chaos.observe.history import History
from chaos.observe.records import Outcome, Phase, Sample
from chaos.observe.sampler import HEALTH

__all__ = ["health_tells_truth", "not_ready_before_gone"]


@verdict(lambda service, phase, **_: f"health_tells_truth({service}, {Phase(phase).value})")
def health_tells_truth(h: History, service: str, *, phase: Phase) -> Finding:
    """A 200 from ``service``'s ``/health`` means it serves: no request of ``phase`` failed
    while the latest probe before its end said healthy (a decode healthy to every checker
    while it can serve nothing: #32652, #31144). Needs ``scenario.watch_health(service)``.
    What /health said during the fault is shown, not judged: an engine whose link to its
    peer is down is itself alive, and SGLang's /health does not look at the link."""
    said = h.series(HEALTH, service)
    if not said:
        return unknown(f"no answer from {service}'s /health was sampled (scenario.watch_health)")
    ops = completed(h, phase)
    if not ops:
        return nothing_at_stake(none_completed(phase))

    def healthy_at(t: float) -> bool:
        before = [val for ts, val in said if ts <= t]
        return bool(before) and before[-1] == 1.0

    lies = [o for o in ops if o.outcome is not Outcome.OK and healthy_at(o.complete.t)]
    fault, heal = h.first_fault_t(), h.last_heal_t()
    during = [val for t, val in said if fault is not None and heal is not None and fault <= t <= heal]
    ok_during = sum(1 for val in during if val == 1.0)
    shown = f"; during the fault it said 200 in {ok_during} of {len(during)} answers" if during else ""
    figures: dict[str, Any] = {"ok_during_fault": ok_during, "answers_during_fault": len(during), "requests": len(ops)}
    if lies:
        ev = "; ".join(f"{label(o)} ended {o.outcome.value} {o.complete.error[:80]}" for o in lies[:3])
        return failed(
            f"{len(lies)} of {len(ops)} failed while {service}'s /health said 200: {ev}{shown}",
            ops=[o.invoke.op for o in lies],
            at=[o.complete.t for o in lies],
            lies=len(lies),
            **figures,
        )
    return passed(f"{len(ops)} requests, none failed while /health said 200{shown}", stake=len(ops), **figures)


@verdict(lambda service, **_: f"not_ready_before_gone({service})")
def not_ready_before_gone(h: History, service: str) -> Finding:
    """Once the fault began (a SIGTERM), ``service``'s readiness probe (an engine's /health,
    smg's /readiness) answered non-200 before it stopped answering at all: readiness fails
    while it still serves, so a load balancer stops sending it work before its port goes
    dark (smg #876, three-phase shutdown). Needs ``scenario.watch_health(service)``."""
    begun = h.first_fault_t()
    if begun is None:
        return nothing_at_stake("no fault in the history")
    probes = [p for p in h.of(Sample) if p.source == HEALTH and p.t >= begun]
    unready = next((p.t for p in probes if p.values.get(service) == 0.0), None)
    gone = next((p.t for p in probes if service not in p.values), None)
    figures: dict[str, Any] = {
        "unready_s": None if unready is None else round(unready - begun, 3),
        "gone_s": None if gone is None else round(gone - begun, 3),
    }
    if unready is not None and (gone is None or unready < gone):
        shown = f", no answer from +{gone - begun:.2f}s" if gone is not None else ""
        return passed(
            f"readiness answered non-200 from +{unready - begun:.2f}s{shown}", stake=1, at=[begun, unready], **figures
        )
    if gone is not None:
        return failed(
            f"readiness went from 200 to no answer at +{gone - begun:.2f}s, never saying it was not ready",
            at=[begun, gone],
            **figures,
        )
    return unknown(
        f"{len(probes)} readiness probes after the fault, none answered non-200 or went unanswered", **figures
    )
