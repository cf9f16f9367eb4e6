"""Bring the lines of engine and router logs that concern this test's requests into its
history, keyed by the request's op id.

The workload sends each request with ``x-request-id: <op>``; smg uses that as its
``request_id`` and forwards it; pdsim logs it as ``xrid`` on the request's first line and
its own ``rid`` on every later state line. Real SGLang ignores ``x-request-id``, but smg
forwards the workload's ``x-smg-routing-key: <op>`` header to both engines and SGLang 0.5.23
(``--log-requests``) logs it as ``routing_key`` on its ``Receive:`` and ``Finish:`` line of
each request; that is the join there. SGLang logs no stage in between, so its open
requests read as state ``open``: in the engine, stage unknown.

A line is parsed once, here, into the fields the verdicts, the stuck table and the doctor
read: a router line's request and whether smg ``started`` or ``finished`` processing it; an
engine line's request, state and, when a timeout released its room, which ``backstop`` and
after how many seconds.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Callable

from chaos.observe.history import History
from chaos.observe.records import LogEvent

__all__ = [
    "BACKSTOPS",
    "WAITING_TIMEOUT",
    "LogCursor",
    "backstop_of",
    "capture_logs",
    "parse_engine_line",
    "parse_router_line",
    "save_logs",
    "strip_ansi",
]

SAVED_LOG_BYTES = 4 << 20  # per service: a failed test's whole story, not a soak's hours

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_KV = re.compile(r'(\w+)=("(?:[^"\\]|\\.)*"|\S+)')
_ROUTER_ID = re.compile(r'request_id="?([\w.:-]+)"?')
_ROUTER_TS = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)")
# SGLang 0.5.23 with --log-requests: "[2026-12-01 03:13:13] Receive: obj=GenerateReqInput(rid='...', ..."
_SGLANG_REQ = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)\] (Receive|Finish): obj=\w+\(rid='([^']+)'")
_SGLANG_KEY = re.compile(r"routing_key='([^']*)'")
_SGLANG_REASON = re.compile(r"'finish_reason': \{'type': '(\w+)'")
_SGLANG_CACHED = re.compile(r"'cached_tokens': (\d+)")
_SGLANG_STATE = {"Receive": "open", "Finish": "finished"}
_SGLANG_START = "server_args="  # the first thing a starting SGLang server logs
# smg 1.13.0's per-request lines: "started processing request" / "finished processing request"
_ROUTER_STATE = re.compile(r"\b(started|finished) processing request\b")
# smg 1.13.0's lines about a worker's state: a load poll setting or clearing its overload
# veto (worker/monitor.rs), a health transition (worker/manager.rs, "old=NotReady new=Failed")
_ROUTER_WORKER = re.compile(
    r"Worker (?:overload veto (?P<veto>set|cleared)|status transition) worker_url=(?P<worker>\S+)(?: old=\w+ new=(?P<status>\w+))?"
)

# Both engines say which timeout released a room in the same words, since pdsim copies
# SGLang's: "Request <room> timed out after 6.0s in KVPoll.WaitingForInput" (SGLang 0.5.23
# common/conn.py, _check_bootstrap_timeout and _check_waiting_timeout), carried in the failed
# request's line (pdsim's "event=req state=failed error=..."; SGLang's "Finish:" line, whose
# finish_reason holds the abort's message). A peer told of the failure repeats the words.
_TIMED_OUT = re.compile(r"timed out after ([\d.]+)s in (KVPoll\.\w+|the prefill inflight queue)")
# The KVPoll state a room timed out in names its timeout: prefill's bootstrap timeout (decode
# never sent its KV indices), decode's waiting timeout (the KV never came; it covers
# Transferring too); pdsim's inflight watchdog says where it watches
WAITING_TIMEOUT = "waiting timeout"
BACKSTOPS = {
    "KVPoll.Bootstrapping": "bootstrap timeout",
    "KVPoll.WaitingForInput": WAITING_TIMEOUT,
    "KVPoll.Transferring": WAITING_TIMEOUT,
    "the prefill inflight queue": "inflight watchdog",
}


def strip_ansi(line: str) -> str:
    return _ANSI.sub("", line)


def parse_router_line(line: str) -> dict[str, str]:
    """The fields of an smg log line: its wall time ``ts`` (1 s resolution) and either its
    ``request_id`` and, on a request's first and last line, ``state`` (``started`` or
    ``finished`` processing it), or, on a line about a worker's state, the ``worker``'s URL
    and its ``veto`` (``set`` or ``cleared``) or new health ``status``; empty otherwise."""
    m = _ROUTER_ID.search(line)
    if m is not None:
        fields = {"request_id": m.group(1)}
        if state := _ROUTER_STATE.search(line):
            fields["state"] = state.group(1)
    elif w := _ROUTER_WORKER.search(line):
        fields = {k: v for k, v in w.groupdict().items() if v}
    else:
        return {}
    if ts := _ROUTER_TS.match(line):
        fields["ts"] = str(time.mktime(time.strptime(ts.group(1), "%Y-%m-%d %H:%M:%S")))
    return fields


def backstop_of(line: str) -> tuple[str, float] | None:
    """(which backstop, after how many seconds) when ``line`` says one released a room."""
    m = _TIMED_OUT.search(line)
    if m is None:
        return None
    return BACKSTOPS[m.group(2)], float(m.group(1))


def _released(line: str) -> dict[str, str]:
    found = backstop_of(line)
    return {} if found is None else {"backstop": found[0], "backstop_s": f"{found[1]:g}"}


def parse_engine_line(line: str) -> dict[str, str]:
    """The fields of an engine's request line, pdsim's logfmt (``event=req rid=... state=...``)
    or real SGLang's ``Receive:``/``Finish:`` lines in the same shape (its own health checks
    left out; ``xrid`` from its ``routing_key``; a Finish whose reason is ``abort`` is
    ``aborted``); a starting SGLang server reads as ``event=engine state=started``."""
    m = _SGLANG_REQ.match(line)
    if m:
        stamp, kind, rid = m.groups()
        if rid.startswith("HEALTH_CHECK"):
            return {}
        ts = time.mktime(time.strptime(stamp, "%Y-%m-%d %H:%M:%S"))
        state = _SGLANG_STATE[kind]
        reason = _SGLANG_REASON.search(line)
        if reason and reason.group(1) == "abort":
            state = "aborted"
        fields = {"event": "req", "rid": rid, "state": state, "ts": str(ts)} | _released(line)
        key, cached = _SGLANG_KEY.search(line), _SGLANG_CACHED.search(line)
        return fields | ({"xrid": key.group(1)} if key else {}) | ({"cached_tokens": cached.group(1)} if cached else {})
    if _SGLANG_START in line and line.startswith("["):
        return {"event": "engine", "state": "started"}
    fields = {k: v.strip('"') for k, v in _KV.findall(line)}
    if fields.get("event") == "req":
        fields |= _released(line)
    return fields


class LogCursor:
    """Remembers how far each service's log has been read, from where it ended when the
    test began, and which engine request ids belong to which op (pdsim names the op only on
    a request's first line), so that a test's logs can be taken in more than one read.

    ``read(service)`` returns the whole log as the target keeps it (a file, ``docker
    logs``, a stack file's command); a log that shrank was rotated, and is read whole."""

    def __init__(self, read: Callable[[str], str], services: tuple[str, ...]) -> None:
        self.read, self.services = read, services
        self.offsets = {name: len(read(name)) for name in services}
        self.began = dict(self.offsets)
        self.ops: dict[str, dict[str, str]] = {name: {} for name in services}  # engine rid -> op

    def new_lines(self, name: str) -> list[str]:
        """The complete lines written since the last read: a line still being written is
        left for the next one."""
        text = self.read(name)
        start = self.offsets[name] if len(text) >= self.offsets[name] else 0
        end = text.rfind("\n", start) + 1
        if end <= start:
            return []
        self.offsets[name] = end
        return [strip_ansi(line).rstrip() for line in text[start:end].splitlines()]


def save_logs(folder: Path, cursor: LogCursor) -> list[Path]:
    """Each service's log since the test began, whole (not only the lines about its
    requests), into ``folder/<service>.log``: what a failed test's report carries, so that a
    nightly job's artifacts hold the engines' side of the story after the stack is gone. A
    log that shrank was rotated and is saved whole; each keeps its last ``SAVED_LOG_BYTES``."""
    folder.mkdir(parents=True, exist_ok=True)
    saved = []
    for name in cursor.services:
        path = folder / f"{name}.log"
        try:
            text = cursor.read(name)
        except Exception as exc:  # a stack gone with the failure: say so, keep the others
            path.write_text(f"pd-chaos: {name}'s log could not be read: {type(exc).__name__}: {exc}\n")
            continue
        start = cursor.began[name] if len(text) >= cursor.began[name] else 0
        path.write_text(strip_ansi(text[max(start, len(text) - SAVED_LOG_BYTES) :]))
        saved.append(path)
    return saved


def capture_logs(history: History, cursor: LogCursor, op_ids: set[str]) -> int:
    """Append a LogEvent per line about one of ``op_ids``, and one (with no op) per router
    line about a worker's state, in the order the router logged them: what says which
    requests smg began while a worker was vetoed; returns how many."""
    n = 0
    for service in cursor.services:
        rid_to_op = cursor.ops[service]
        for line in cursor.new_lines(service):
            if service == "router":
                fields = parse_router_line(line)
                rid = fields.get("request_id")
                if rid not in op_ids and "worker" not in fields:
                    continue
                t = float(fields.get("ts", history.started_wall)) - history.started_wall
                history.append(LogEvent(t, service, line, op=rid or "", fields=fields))
                n += 1
                continue
            fields = parse_engine_line(line)
            rid = fields.get("rid")
            if fields.get("event") != "req" or not rid:
                continue
            if fields.get("xrid") in op_ids:  # pdsim's first line of a request, or every SGLang line
                rid_to_op[rid] = fields["xrid"]
            op = rid_to_op.get(rid)
            if op is None:
                continue
            wall = float(fields.get("ts", history.started_wall))
            history.append(LogEvent(wall - history.started_wall, service, line, op=op, fields=fields))
            n += 1
    return n
