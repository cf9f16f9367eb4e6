"""Where is it stuck: for every request that did not end ``ok``, the last hop with evidence.

Joins the client ledger (the op and its outcome), the router's log (did it see the
request, did it finish it) and the engines' per-request state lines. The hop is the
earliest pipeline stage that the request entered and never left, because that is the
stage it could not get past; with no engine evidence, the router; with no router
evidence, the client or a proxy before the router (where the incident's requests were).
"""

from __future__ import annotations

from dataclasses import dataclass

from chaos.observe.history import History
from chaos.observe.pipeline import BEFORE_ROUTER, HOPS, STATE_HOP, TERMINAL_STATES
from chaos.observe.records import LogEvent, Outcome
from chaos.system.topology import is_engine, kind_of

__all__ = ["StuckRow", "where_stuck"]


@dataclass(frozen=True)
class StuckRow:
    op: str
    who: str
    outcome: str
    hop: str
    evidence: str


def _lines_by_op(history: History) -> dict[str, list[LogEvent]]:
    out: dict[str, list[LogEvent]] = {}
    for ev in history.of(LogEvent):
        out.setdefault(ev.op, []).append(ev)
    return out


def _engine_stages(evs: list[LogEvent]) -> dict[str, tuple[str, str, float]]:
    """Per engine (every one of a topology's: ``decode2`` passes decode's hops): (hop of the
    last non-terminal state, the terminal state that followed it or "" while the engine still
    holds the request, t)."""
    out: dict[str, tuple[str, str, float]] = {}
    for e in evs:
        if e.service == "router" or not is_engine(e.service):
            continue
        kind, state = kind_of(e.service), e.fields.get("state", "")
        if state in TERMINAL_STATES:
            hop, _, _ = out.get(e.service, (STATE_HOP.get((kind, "open"), kind), "", e.t))
            out[e.service] = (hop, state, e.t)
        elif (kind, state) in STATE_HOP:
            out[e.service] = (STATE_HOP[(kind, state)], "", e.t)
    return out


def _on(hop: str, stages: dict[str, tuple[str, str, float]]) -> str:
    """``hop``, naming the engine it is on where that is a topology's second of a kind."""
    engines = sorted(svc for svc, (h, _, _) in stages.items() if h == hop)
    numbered = [e for e in engines if e != kind_of(e)]
    return f"{hop} ({', '.join(engines)})" if numbered else hop


def where_stuck(history: History) -> list[StuckRow]:
    rows = []
    lines = _lines_by_op(history)
    for op in history.ops():
        if op.outcome is Outcome.OK:
            continue
        evs = lines.get(
            op.invoke.op, []
        )  # all of it: a leg the engines still hold after the client gave up is where it is stuck
        router = {e.fields.get("state") for e in evs if e.service == "router"}
        router_started, router_finished = "started" in router, "finished" in router
        stages = _engine_stages(evs)
        ev = [
            f"{svc}: {'ended' if end else 'still'} in {hop} (t={t:.2f}s)"
            for svc, (hop, end, t) in sorted(stages.items())
        ]
        if router_started:
            ev.append("router: " + ("finished it" if router_finished else "started it, never finished"))
        open_hops = [hop for hop, end, _ in stages.values() if not end]
        if open_hops:
            hop = _on(min(open_hops, key=HOPS.index), {s: v for s, v in stages.items() if not v[1]})
        elif stages:  # every engine ended it: it failed there, or was lost after them
            failed = {s: v for s, v in stages.items() if v[1] in ("failed", "aborted")}
            if failed:
                hop = _on(min((h for h, _, _ in failed.values()), key=HOPS.index), failed)
            else:
                hop = "router" if not router_finished else BEFORE_ROUTER
        elif router_started:
            hop = "router"
            ev.append("no engine logged it")
        else:
            hop = BEFORE_ROUTER
            ev.append("neither the router nor an engine logged it")
        who = f"{op.invoke.agent} round {op.invoke.round}" if op.invoke.agent else op.invoke.phase or "-"
        rows.append(StuckRow(op.invoke.op, who, op.outcome.value if op.outcome else "open", hop, "; ".join(ev)))
    return rows
