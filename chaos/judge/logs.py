"""What the engines' logs say of each request: how often an engine received it (retry
amplification), and whether it served one from a cached prefix."""

from __future__ import annotations

from typing import Any, Collection, Iterable, Iterator

from chaos.history import History, LogEvent, Phase
from chaos.judge.declare import premise, verdict
from chaos.judge.model import Finding, failed, passed, unknown, unmet
from chaos.judge.ops import completed, none_completed

__all__ = ["amplification_at_most", "prefix_reused", "receptions", "requests_retried"]


def _lines(history: History, service: str, ops: Collection[str]) -> Iterator[LogEvent]:
    """``service``'s captured log lines about one of ``ops`` (``chaos.reports.logs``)."""
    return (ev for ev in history.of(LogEvent) if ev.service == service and ev.op in ops)


def receptions(history: History, service: str, ops: Iterable[str]) -> dict[str, int]:
    """How many times ``service`` received each op: the engine request ids its log lines
    name, joined to the op the client sent."""
    rids: dict[str, set[str]] = {op: set() for op in ops}
    for ev in _lines(history, service, rids):
        if rid := ev.fields.get("rid"):
            rids[ev.op].add(rid)
    return {op: len(found) for op, found in rids.items()}


@verdict(lambda budget, phase, service, **_: f"amplification_at_most({budget}, {service}, {Phase(phase).value})")
def amplification_at_most(h: History, budget: int, *, phase: Phase, service: str = "prefill") -> Finding:
    """Each client request of ``phase`` reached ``service`` at most ``budget`` times (one
    try and the router's retries): one request, however it failed, must not become more
    executions than the retry budget allows (sglang PR #34570: a PD dispatch is not
    idempotent). The amplification factor, mean and worst, is in the message; the count is
    of the service's log lines joined to each request, so when none names any, unknown."""
    ops = completed(h, phase)
    if not ops:
        return unknown(none_completed(phase))
    seen = receptions(h, service, (o.invoke.op for o in ops))
    counted = [n for n in seen.values() if n]
    if not counted:
        return unknown(f"no {service} log line names any of the {len(ops)} requests")
    mean = sum(counted) / len(counted)
    figures: dict[str, Any] = {
        "mean": round(mean, 3),
        "worst": max(counted),
        "requests": len(counted),
        "budget": budget,
    }
    factor = f"amplification {mean:.2f} mean, {max(counted)} worst over {len(counted)} requests (budget {budget})"
    over = sorted(((n, op) for op, n in seen.items() if n > budget), reverse=True)
    if over:
        shown = ", ".join(f"{op} x{n}" for n, op in over[:5])
        return failed(f"{factor}; over budget: {shown}", ops=[op for _, op in over], **figures)
    missing = len(ops) - len(counted)
    return passed(factor + (f"; {missing} never seen in {service}'s log" if missing else ""), unseen=missing, **figures)


@premise(lambda phase, service, **_: f"requests_retried({service}, {Phase(phase).value})")
def requests_retried(h: History, *, phase: Phase, why: str, service: str = "prefill") -> Finding:
    """Premise: ``service`` received at least one request of ``phase`` more than once (the
    router retried it): otherwise the run tested no retry."""
    seen = receptions(h, service, (o.invoke.op for o in completed(h, phase)))
    again = [op for op, n in seen.items() if n > 1]
    if not again:
        return unmet(f"no request of {len(seen)} reached {service} twice ({why})", requests=len(seen))
    return passed(f"{len(again)} of {len(seen)} reached {service} more than once", ops=again, retried=len(again))


@premise(lambda service, phase, **_: f"prefix_reused({service}, {Phase(phase).value})")
def prefix_reused(h: History, service: str, *, phase: Phase, why: str) -> Finding:
    """Premise: ``service`` served at least one request of ``phase`` from a cached prefix:
    its finish line for the request reports ``cached_tokens`` above 0 (SGLang's ``Finish:``
    meta_info, pdsim's finished line). On decode that count includes prefill's own cache
    hits (SGLang 0.5.23 seeds it with them), so a scenario proving decode's reuse flushes
    prefill's cache first."""
    ops = {o.invoke.op for o in completed(h, phase)}
    reused: dict[str, int] = {}
    for ev in _lines(h, service, ops):
        if (n := int(ev.fields.get("cached_tokens") or 0)) > 0:
            reused[ev.op] = max(reused.get(ev.op, 0), n)
    if not reused:
        return unmet(f"no log line of {service} shows a cached prefix for the {len(ops)} requests ({why})")
    return passed(
        f"{len(reused)} of {len(ops)} requests served from a cached prefix, up to {max(reused.values())} tokens",
        ops=list(reused),
        cached_tokens=reused,
    )
