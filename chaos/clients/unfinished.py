"""Requests whose body never arrives as their head promised: a ``Content-Length`` beyond any
sane size, or a body that stops partway and never finishes (a slow or hostile client).

Why not httpx: its HTTP/1.1 engine (h11) sends the whole body before it reads an answer, so it
can neither send a body that stops nor see a server that answers before the body ends. This
client writes the head and the bytes it means to send over a plain socket, leaves the rest
unsent, and reads whatever answer comes within its total deadline: an early refusal (413), a
timeout for the missing bytes (408), a closed connection, or nothing. Each request is recorded
as an ``Invoke`` and its ``Complete``, as the rig's other clients do.
"""

from __future__ import annotations

import itertools
import socket
import time
from typing import Any
from urllib.parse import urlsplit

from chaos.clients.client import Deadlines, context_of, ending, error_text, trace_headers
from chaos.observe.history import History
from chaos.observe.records import Complete, Invoke, Outcome, Phase
from chaos.system.limits import waiting

__all__ = ["send_unfinished"]

_ids = itertools.count(1)
_TAIL_S = 0.5  # after an answer's head: how long its body may take to come
_MAX_ANSWER = 1 << 16


def send_unfinished(
    base_url: str,
    history: History,
    deadlines: Deadlines,
    path: str,
    *,
    declared: int,
    sent: bytes,
    invalid: str,
    phase: Phase = Phase.DERIVED,
    workload: str = "",
) -> Complete:
    """POST ``path`` with a head that declares ``declared`` bytes of JSON body, send ``sent``
    (fewer), and wait up to ``deadlines.total_s`` for an answer. ``invalid``: why the request
    is the client's own error."""
    op = f"raw{next(_ids)}"
    history.append(
        Invoke(
            history.now(),
            time.time(),
            op,
            path,
            False,
            "",
            -1,
            context_of({"declared": declared, "sent": sent.decode(errors="replace")}),
            phase,
            workload,
            invalid=invalid,
            unfinished=True,
        )
    )
    url = urlsplit(base_url)
    host, port = url.hostname or "127.0.0.1", url.port or 80
    with waiting(f"{op} {path} (an unfinished body) to end", deadlines.ends_within_s):
        end, first_byte = _exchange(history, host, port, path, op, declared, sent, deadlines)
    return history.append(Complete(history.now(), time.time(), op, first_byte_t=first_byte, **end))


def _exchange(
    history: History, host: str, port: int, path: str, op: str, declared: int, sent: bytes, d: Deadlines
) -> tuple[dict[str, Any], float | None]:
    started = time.monotonic()
    try:
        sock = socket.create_connection((host, port), timeout=d.connect_s)
    except OSError as exc:
        return ending(Outcome.CONNECTION_ERROR, error=f"connect: {exc}"), None
    head = "".join(
        f"{k}: {v}\r\n"
        for k, v in {
            "host": f"{host}:{port}",
            "content-type": "application/json",
            "content-length": str(declared),
            **trace_headers(op),
        }.items()
    )
    answer = b""
    first_byte: float | None = None
    with sock:
        try:
            sock.settimeout(d.connect_s)
            sock.sendall(f"POST {path} HTTP/1.1\r\n{head}\r\n".encode() + sent)
        except OSError:
            pass  # refused while the body was still going: its answer may be waiting to be read
        deadline = started + d.total_s
        while len(answer) < _MAX_ANSWER:
            left = deadline - time.monotonic()
            if b"\r\n\r\n" in answer:  # the head came: its body may follow, briefly
                left = min(left, _TAIL_S)
            if left <= 0:
                break
            sock.settimeout(left)
            try:
                chunk = sock.recv(_MAX_ANSWER)
            except TimeoutError:
                break
            except OSError as exc:
                if not answer:
                    return ending(Outcome.CONNECTION_ERROR, error=f"{type(exc).__name__} before an answer"), None
                break
            if not chunk:
                break
            first_byte = first_byte if first_byte is not None else history.now()
            answer += chunk
    return _answered(answer, d, time.monotonic() - started), first_byte


def _answered(answer: bytes, d: Deadlines, took_s: float) -> dict[str, Any]:
    """The ``Complete`` fields of what came back (nothing, bytes that are no HTTP answer, or one)."""
    if not answer:
        if took_s >= d.total_s:
            return ending(Outcome.CLIENT_TIMEOUT, error=f"no answer within the total deadline {d.total_s:g}s")
        return ending(Outcome.CONNECTION_ERROR, error=f"closed after {took_s:.2f}s without an answer")
    head, _, body = answer.partition(b"\r\n\r\n")
    status_line = head.split(b"\r\n", 1)[0].split()
    if len(status_line) < 2 or not status_line[0].startswith(b"HTTP/") or not status_line[1].isdigit():
        return ending(Outcome.TRUNCATED, error=f"not an HTTP answer: {answer[:80]!r}")
    status = int(status_line[1])
    if status >= 400:
        return ending(Outcome.CLEAN_ERROR, status, error=error_text(body) or status_line[-1].decode(errors="replace"))
    return ending(Outcome.OK, status, reply=body.decode(errors="replace")[:500])
