"""What each kind of fault means, declared once: whether it ends what the struck service was
serving, where the system's primary paths alone answer it (no timeout or watchdog needed),
and how it cuts the client's own hop. The verdicts (``no_hidden_fault``), explore's schedules
(which invariants a schedule is judged by) and its renderer read this table, never a table of
their own; as Toxiproxy keeps each toxic's knowledge in the toxic.

A kind is named by its action, as a fault event records it (``FaultEvent.action``) and as
explore's strikes name it. What a fault strikes (the engines it implicates) is its class's
own (``Fault.implicates``): it depends on the fault's target, not only on its kind.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Mapping

from chaos.observe.records import Outcome
from chaos.system.topology import first_of_kind

__all__ = ["ANYWHERE", "CUT_OUTCOMES", "KINDS", "Kind", "cut_of", "ends_serving", "primary_path"]

ANYWHERE = "*"  # a kind whose effect is a primary path wherever it strikes


@dataclass(frozen=True)
class Kind:
    """One kind of fault. ``ends_serving``: the struck service's process is gone, or it
    aborted everything it held (acknowledged), so no stream it was serving can go on.
    ``primary_at``: where (a service or a link, or ``ANYWHERE``) its effect is answered by
    the primary paths alone: an engine's abort of its rooms, a cache flush, a KV link that
    refuses or resets (the transfer fails at once, and prefill tells decode). ``cuts``:
    where it strikes -> the cut it makes of the client's own hop (``CUT_OUTCOMES``)."""

    ends_serving: bool = False
    primary_at: frozenset[str] = frozenset()
    cuts: Mapping[str, str] = field(default_factory=dict)


_LINK_CUT = MappingProxyType({"client_router": "link"})  # nothing past a cut client link reaches the client

KINDS: dict[str, Kind] = {
    "kill": Kind(ends_serving=True, cuts={"router": "router_killed"}),
    "restart": Kind(ends_serving=True, cuts={"router": "router_killed"}),
    "terminate": Kind(cuts={"router": "router_drained"}),
    "freeze": Kind(cuts={"decode": "decode_frozen"}),
    "abort_all": Kind(ends_serving=True, primary_at=frozenset({ANYWHERE})),
    "flush_cache": Kind(primary_at=frozenset({ANYWHERE})),  # refused while busy: nothing for a backstop to do
    "down": Kind(primary_at=frozenset({"kv"}), cuts=_LINK_CUT),
    "reset_peer": Kind(primary_at=frozenset({"kv"}), cuts=_LINK_CUT),
    "blackhole": Kind(cuts=_LINK_CUT),
    "latency": Kind(cuts=_LINK_CUT),
    "bandwidth": Kind(cuts=_LINK_CUT),
}

# How a request may end when a fault cuts the client's own hop: nothing past a cut link, or a
# dead router, can send the client an error, so these are the clean ends there (the same sets
# suites/test_proxy_wedge.py and suites/test_router_restart.py judge). A router drained by
# SIGTERM still finishes what it holds: only requests sent once its port is dark may fail. A
# frozen decode (SIGSTOP) holds the streams it serves: no byte, no error, no close can come from
# it, and smg waits on it, so the client's own deadline ends them (the gray failure the
# incident's client had no timeout for); once it thaws, what it held goes on. Whatever the
# cut, a client may hang up on purpose (an impatient load in the same phase).
_CLIENT = frozenset({Outcome.CLEAN_ERROR, Outcome.HUNG_UP})
CUT_OUTCOMES: dict[str, frozenset[Outcome]] = {
    "link": _CLIENT | {Outcome.CLIENT_TIMEOUT, Outcome.CONNECTION_ERROR, Outcome.TRUNCATED, Outcome.STALLED},
    "router_killed": _CLIENT | {Outcome.CONNECTION_ERROR, Outcome.TRUNCATED},
    "router_drained": _CLIENT | {Outcome.CONNECTION_ERROR},
    "decode_frozen": _CLIENT | {Outcome.CLIENT_TIMEOUT, Outcome.STALLED},
}


def _kind(action: str) -> Kind:
    return KINDS.get(action, Kind())  # a kind not declared means nothing beyond its failures


def ends_serving() -> frozenset[str]:
    """The actions that end what the struck service was serving (read at the call: the
    table is the one place to change)."""
    return frozenset(a for a, k in KINDS.items() if k.ends_serving)


def primary_path(action: str, where: str) -> bool:
    """Whether the primary paths alone answer ``action`` on ``where``."""
    at = _kind(action).primary_at
    return ANYWHERE in at or first_of_kind(where) in at


def cut_of(action: str, where: str) -> str | None:
    """The cut ``action`` on ``where`` makes of the client's hop (``CUT_OUTCOMES``), if any."""
    return _kind(action).cuts.get(first_of_kind(where))
