"""Request ids started and not finished, per hop, from the router's and engines' logs.

Router (smg): the lines ``parse_router_line`` reads as a request ``started`` or ``finished``
(smg's "started processing request" / "finished processing request"). Engines: pdsim's
logfmt (see pdsim/reqlog.py) ``event=req rid=... state=`` lines, or real SGLang's ``Receive:``/``Finish:`` lines (``--log-requests``), read alike by
``parse_engine_line``; a request is open while its last state is not terminal, and an
engine restart closes everything the old process held. SGLang's lines say only that an
engine received a request, so its open requests count at "<engine>, stage not logged";
its gauges say which queue holds them.
"""

from __future__ import annotations

from chaos.observe.logs import parse_engine_line, parse_router_line, strip_ansi
from chaos.observe.pipeline import STATE_HOP, TERMINAL_STATES

__all__ = ["open_requests"]


def _router_open(text: str, since: float) -> dict[str, list[str]]:
    started: dict[str, float] = {}
    for raw in text.splitlines():
        fields = parse_router_line(strip_ansi(raw))
        rid, state = fields.get("request_id"), fields.get("state")
        wall = float(fields.get("ts", since))
        if rid is None:
            continue
        if state == "started" and wall >= since - 1:  # the log has 1 s resolution
            started[rid] = wall
        elif state == "finished":
            started.pop(rid, None)
    return {"router": sorted(started, key=started.__getitem__)} if started else {}


def _engine_open(service: str, text: str, since: float) -> dict[str, list[str]]:
    state: dict[str, tuple[str, float]] = {}  # rid -> (hop, first seen)
    for raw in text.splitlines():
        fields = parse_engine_line(strip_ansi(raw))
        if fields.get("event") == "engine" and fields.get("state") == "started":
            state.clear()  # a new process: the old one's requests died with it
            continue
        rid = fields.get("rid")
        if fields.get("event") != "req" or not rid:
            continue
        s = fields.get("state", "")
        first = state.get(rid, ("", float(fields.get("ts", since))))[1]
        if s in TERMINAL_STATES:
            state.pop(rid, None)
        elif (service, s) in STATE_HOP:
            state[rid] = (STATE_HOP[(service, s)], first)
    out: dict[str, list[str]] = {}
    for rid, (hop, first) in sorted(state.items(), key=lambda kv: kv[1][1]):
        if first >= since:
            out.setdefault(hop, []).append(rid)
    return out


def open_requests(logs: dict[str, str], since: float) -> dict[str, list[str]]:
    """hop -> request ids open there (started at or after ``since``, wall seconds)."""
    out: dict[str, list[str]] = {}
    for service, text in logs.items():
        found = _router_open(text, since) if service == "router" else _engine_open(service, text, since)
        for hop, ids in found.items():
            out.setdefault(hop, []).extend(ids)
    return out
