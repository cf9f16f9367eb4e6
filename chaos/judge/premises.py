"""Premises: what the run must have done for its verdicts to mean anything. The fault met
requests (some failed, all were open when it struck, all ended as meant). Unmet, the run tested nothing: a rig outcome, never a
verdict. Each unmet premise keeps what the run did instead, so that a fault whose effect
the system hid (every open request "succeeded") reads apart from one the rig fired late:
when the fault struck, which requests were open then, and how they ended."""

from __future__ import annotations

from typing import Any

from chaos.judge.attempts import met_a_failure
from chaos.judge.declare import premise
from chaos.judge.model import Finding, met, unmet
from chaos.judge.ops import completed, label, naming, none_completed
from chaos.observe.history import History
from chaos.observe.records import Done, Outcome, Phase, Stage

__all__ = ["ended_as", "fault_did", "open_at_fault", "requests_affected", "requests_slowed"]


def _at_fault(h: History, ops: list[Done]) -> dict[str, Any]:
    """When the fault struck, and how the requests it met open ended: the evidence that
    tells a fault the system hid from one that came too late."""
    struck = h.first_fault_t()
    open_then = [o for o in ops if struck is not None and o.invoke.t < struck < o.complete.t]
    return {
        "fault_at": None if struck is None else round(struck, 3),
        "open_at_fault": len(open_then),
        "open_at_fault_ended": sorted({o.outcome.value for o in open_then}),
    }


@premise(lambda phase, **_: f"requests_affected({Phase(phase).value})")
def requests_affected(h: History, *, phase: Phase, why: str) -> Finding:
    """Premise: the fault reached at least one request of ``phase``: one did not succeed,
    or decode logged one of its attempts failing (the system then hid the failure from its
    client, which ``failures_reach_the_client`` judges: a finding, not the rig's miss). When
    every request succeeded and none met a failure, the fault landed after they were done;
    the evidence says how many were open when it struck."""
    ops = completed(h, phase)
    if not ops:
        return unmet(none_completed(phase))
    hit = [o for o in ops if o.outcome is not Outcome.OK]
    hidden = met_a_failure(h, [o.invoke.op for o in ops if o.outcome is Outcome.OK])
    if hidden:
        return met(
            f"{len(hit)} of {len(ops)} requests failed, {len(hidden)} more met a failure decode logged",
            ops=[*(o.invoke.op for o in hit), *hidden],
            hit=len(hit),
            hidden=len(hidden),
        )
    if not hit:
        return unmet(
            f"all {len(ops)} requests succeeded: the fault came too late for its premise ({why})",
            ops=[o.invoke.op for o in ops],
            requests=len(ops),
            **_at_fault(h, ops),
        )
    return met(f"{len(hit)} of {len(ops)} requests met the fault", ops=[o.invoke.op for o in hit], hit=len(hit))


@premise(lambda outcome, phase, **_: f"ended_as({Outcome(outcome).value}, {Phase(phase).value})")
def ended_as(h: History, outcome: Outcome, *, phase: Phase, why: str) -> Finding:
    """Premise: every request of ``phase`` ended as ``outcome`` (e.g. each abandoned request
    was still in flight when its client gave up, not refused up front)."""
    ops = completed(h, phase)
    if not ops:
        return unmet(none_completed(phase))
    other = [o for o in ops if o.outcome is not outcome]
    if other:
        return naming(
            other,
            len(ops),
            f"did not ({why})",
            lambda o: f"{label(o)} ended {o.outcome.value} {o.complete.error[:80]}",
            shown=3,
            finding=unmet,
            ended=sorted({o.outcome.value for o in other}),
        )
    return met(f"all {len(ops)} ended {outcome.value}", requests=len(ops))


@premise(lambda phase, **_: f"open_at_fault({Phase(phase).value})")
def open_at_fault(h: History, *, phase: Phase, why: str) -> Finding:
    """Premise: every request of ``phase`` was sent before the fault began and ended after
    it: the fault met them open (a SIGTERM that came once they were done tested nothing)."""
    begun = h.first_fault_t()
    ops = completed(h, phase)
    if begun is None or not ops:
        return unmet("no fault in the history" if begun is None else none_completed(phase))
    closed = [o for o in ops if not o.invoke.t < begun < o.complete.t]
    if closed:
        ev = "; ".join(f"{label(o)} ended at t={o.complete.t:.2f}s" for o in closed[:3])
        return unmet(
            f"{len(closed)} of {len(ops)} were not open at the fault (t={begun:.2f}s; {why}): {ev}",
            ops=[o.invoke.op for o in closed],
            at=[begun],
            closed=len(closed),
            **_at_fault(h, ops),
        )
    return met(f"all {len(ops)} open at the fault", at=[begun], requests=len(ops), **_at_fault(h, ops))


@premise(lambda figure, **_: f"fault_did({figure})")
def fault_did(h: History, figure: str, *, why: str) -> Finding:
    """Premise: a fault healed in the run counted ``figure`` above 0 (``FaultEvent.figures``,
    as the fault counted it): a corruption that flipped no byte, a delay that held no packet,
    tested nothing, whatever the requests did."""
    healed = [f for f in h.faults() if f.stage is Stage.HEAL_VERIFIED]
    if not healed:
        return unmet("no fault was healed in the run")
    did = {f.fault: f.figures[figure] for f in healed if f.figures.get(figure, 0) > 0}
    if not did:
        return unmet(
            f"no fault counted any {figure} ({why})",
            faults={f.fault: f.figures for f in healed},
        )
    return met(f"{', '.join(f'{k}: {v:g} {figure}' for k, v in did.items())}", figure=figure, count=sum(did.values()))


@premise(lambda by_s, **_: f"requests_slowed(by={by_s:g}s)")
def requests_slowed(h: History, *, by_s: float, why: str) -> Finding:
    """Premise: the fault slowed the requests sent into it: the span of those that succeeded
    (``Phase.FAULT``), from the first sent to the last served, exceeds the fault-free
    baseline's (``Phase.BASELINE``) by ``by_s`` at least. A delay that slowed nothing tested
    nothing of "slow, not stuck", however well the requests did. The span, not each request's
    time: requests sent together queue behind one another (one prefill forward, transfers one
    after another), so a request's own time depends on its place in the queue (pdsim, three
    requests: a baseline of 0.43, 1.07 and 1.07 s, a fault of 1.02, 1.02 and 1.34 s: the
    medians said faster, the span 0.27 s slower). A delay of D on a link each request crosses
    adds close to D, less what overlapped with the requests' other waits: ask for half of it."""
    served = {p: [o for o in completed(h, p) if o.outcome is Outcome.OK] for p in (Phase.BASELINE, Phase.FAULT)}
    if not all(served.values()):
        return unmet(
            "no baseline or no fault request succeeded: nothing to compare",
            requests={p.value: len(ops) for p, ops in served.items()},
        )
    spans = {p: max(o.complete.t for o in ops) - min(o.invoke.t for o in ops) for p, ops in served.items()}
    base, slowed = spans[Phase.BASELINE], spans[Phase.FAULT]
    figures: dict[str, Any] = {"baseline_s": round(base, 3), "fault_s": round(slowed, 3), "by_s": by_s}
    said = f"the fault's requests took {slowed:.2f}s from the first sent to the last served, the baseline's {base:.2f}s"
    if slowed - base < by_s:
        return unmet(f"{said}: slowed by {slowed - base:.2f}s, not {by_s:g}s ({why})", **figures)
    return met(said, **figures)
