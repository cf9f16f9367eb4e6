"""What the engines' logs say of each request: the lines captured about it, and how often
an engine received it. The verdicts built on them live next to their scenarios
(``suites/test_retry_amplification.py``, ``suites/test_decode_radix_cache.py``)."""

from __future__ import annotations

from typing import Collection, Iterable, Iterator

from chaos.observe.history import History
from chaos.observe.records import LogEvent
from chaos.system.topology import is_engine, kind_of

__all__ = ["log_lines", "placed", "receptions"]


def log_lines(history: History, service: str, ops: Collection[str]) -> Iterator[LogEvent]:
    """``service``'s captured log lines about one of ``ops`` (``chaos.observe.logs``)."""
    return (ev for ev in history.of(LogEvent) if ev.service == service and ev.op in ops)


def placed(history: History, engine: str) -> dict[str, set[str]]:
    """Each request's engines of ``engine``'s kind (its twins in a topology and itself), by
    their log lines about it: a request an engine logged went through it."""
    kind = kind_of(engine)
    where: dict[str, set[str]] = {}
    for ev in history.of(LogEvent):
        if ev.op and is_engine(ev.service) and kind_of(ev.service) == kind:
            where.setdefault(ev.op, set()).add(ev.service)
    return where


def receptions(history: History, service: str, ops: Iterable[str]) -> dict[str, int]:
    """How many times ``service`` received each op: the engine request ids its log lines
    name, joined to the op the client sent."""
    rids: dict[str, set[str]] = {op: set() for op in ops}
    for ev in log_lines(history, service, rids):
        if rid := ev.fields.get("rid"):
            rids[ev.op].add(rid)
    return {op: len(found) for op, found in rids.items()}
