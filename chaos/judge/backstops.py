"""Which path let a request go: the engines' logs name a backstop when one released it.

A PD request has primary paths that end it: the client hangs up and smg drops both legs; an
engine aborts a room and tells its peer (decode's ``AbortNotification`` to prefill, prefill's
failed status to decode); a transfer fails and the engine that saw it says so. Behind them
stand backstops: prefill's bootstrap timeout, decode's waiting timeout, and (pdsim's, as a
patched SGLang's) prefill's inflight watchdog. A backstop that frees a request the primary
path should have freed hides a broken primary path behind a delay: everything is freed in
the end, each time seconds late, and under load those seconds are the incident.

Both engines say which timeout released a room in the same words, since pdsim copies
SGLang's: ``Request <room> timed out after 6.0s in KVPoll.WaitingForInput`` (SGLang 0.5.23
``common/conn.py``, ``_check_bootstrap_timeout`` and ``_check_waiting_timeout``), carried in
the failed request's log line (pdsim's ``event=req state=failed error=...``; SGLang's
``Finish:`` line, whose ``finish_reason`` holds the abort's message). A peer told of the
failure repeats the words, so a backstop is named by what it says, not by who logged it.
"""

from __future__ import annotations

import re

from chaos.judge.declare import verdict
from chaos.judge.model import Finding, failed, passed, unknown
from chaos.judge.ops import phase_tag, scope
from chaos.observe.history import History, LogEvent, Phase

__all__ = ["BACKSTOPS", "WAITING_TIMEOUT", "backstop_of", "backstops_stay_idle"]

_TIMED_OUT = re.compile(r"timed out after ([\d.]+)s in (KVPoll\.\w+|the prefill inflight queue)")
# SGLang's KVPoll state a room timed out in names its timeout: prefill's bootstrap timeout
# (decode never sent its KV indices), decode's waiting timeout (the KV never came; it covers
# Transferring too); pdsim's inflight watchdog says where it watches
WAITING_TIMEOUT = "waiting timeout"
BACKSTOPS = {
    "KVPoll.Bootstrapping": "bootstrap timeout",
    "KVPoll.WaitingForInput": WAITING_TIMEOUT,
    "KVPoll.Transferring": WAITING_TIMEOUT,
    "the prefill inflight queue": "inflight watchdog",
}


def backstop_of(line: str) -> tuple[str, float] | None:
    """(which backstop, after how many seconds) when ``line`` says one released a room."""
    m = _TIMED_OUT.search(line)
    if m is None:
        return None
    return BACKSTOPS.get(m.group(2), m.group(2)), float(m.group(1))


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
        if (found := backstop_of(ev.line)) is not None:
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
