"""Which path let a request go: the engines' logs name a backstop when one released it.

A PD request has primary paths that end it: the client hangs up and smg drops both legs; an
engine aborts a room and tells its peer (decode's ``AbortNotification`` to prefill, prefill's
failed status to decode); a transfer fails and the engine that saw it says so. Behind them
stand backstops: prefill's bootstrap timeout, decode's waiting timeout, and (pdsim's, as a
patched SGLang's) prefill's inflight watchdog. A backstop that frees a request the primary
path should have freed hides a broken primary path behind a delay: everything is freed in
the end, each time seconds late, and under load those seconds are the incident.

Both engines say which timeout released a room in the same words (SGLang's, which pdsim
copies); the log capture reads them once into each line's fields (``backstop``,
``backstop_s``: ``chaos.observe.logs``), so that a backstop is named by what was said, not by
who logged it, and no verdict parses a line.
"""

from __future__ import annotations

from chaos.judge.declare import verdict
from chaos.judge.model import Finding, failed, passed, unknown
from chaos.judge.ops import phase_tag, scope
from chaos.observe.history import History
from chaos.observe.records import LogEvent, Phase

__all__ = ["backstops_stay_idle", "released_by"]


def released_by(ev: LogEvent) -> tuple[str, float] | None:
    """(which backstop, after how many seconds) when a captured line says one released a
    room (``chaos.observe.logs.backstop_of``, read at capture)."""
    if "backstop" not in ev.fields:
        return None
    return ev.fields["backstop"], float(ev.fields["backstop_s"])


def _label(phase: Phase | None = None, workload: str | None = None, **_: object) -> str:
    return "backstops_stay_idle" + phase_tag(phase) + (f"({workload})" if workload else "")


@verdict(_label)
def backstops_stay_idle(h: History, *, phase: Phase | None = None, workload: str | None = None) -> Finding:
    """No request (of ``phase``, of ``workload``) was released by a backstop. Declared where
    only primary paths acted on those requests (the clients' own hang-ups, an engine's abort
    of its rooms, a KV link refusing or resetting; no engine, other link or router struck),
    so that every release belonged to one of them: a timeout that fired there stood in for
    a primary path that failed to act. Unknown when the engines logged nothing about the
    requests (no line to tell a release by)."""
    ops = {o.invoke.op for o in scope(h, phase) if workload is None or o.invoke.workload == workload}
    lines = [ev for ev in h.of(LogEvent) if ev.op in ops and ev.service in ("prefill", "decode")]
    if not lines:
        return unknown(f"the engines logged nothing about the {len(ops)} requests")
    released: dict[tuple[str, str], tuple[LogEvent, float]] = {}  # (op, backstop): its first line, seconds
    for ev in lines:
        if (found := released_by(ev)) is not None:
            released.setdefault((ev.op, found[0]), (ev, found[1]))
    logged = len({ev.op for ev in lines})
    if released:
        told = "; ".join(
            f"{op} by {which} after {after:g}s ({ev.service} at t={ev.t:.2f}s)"
            for (op, which), (ev, after) in list(released.items())[:5]
        )
        return failed(
            f"{len({op for op, _ in released})} of {logged} requests were released by a backstop: {told}",
            ops=sorted({op for op, _ in released}),
            at=[ev.t for ev, _ in released.values()],
            backstops=sorted({which for _, which in released}),
            of=logged,
        )
    return passed(f"the engines' lines about {logged} requests name no backstop", stake=logged, of=logged)
