"""How many prefill and decode engines a stack runs (``--topology 2p1d``), and their names.

Production runs xPyD: a second prefill on the same host is where route caches keyed by host
alone show, a second decode is where the router must route around a dead or frozen one, and
where decode's heartbeat must give up only the prefill that is gone. None of that can happen
with one of each.

The first engine of each kind keeps its plain name (``prefill``, ``decode``), so every suite
written for one of each runs unchanged on a larger stack, against its first pair; the
others are numbered from 2 (``prefill2``, ``decode2``). Each prefill has its own bootstrap
and control proxies (``bootstrap2``, ``control2``: decode's links to it), each decode its own
kv proxy (``kv2``: prefills' KV to it).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from chaos.errors import ConfigError

__all__ = [
    "ENGINE_NAME",
    "MAX_OF_A_KIND",
    "Topology",
    "first_of_kind",
    "is_engine",
    "kind_of",
    "link_ends",
    "link_of",
    "worker_name",
]

MAX_OF_A_KIND = 2  # the ports of one stack hold two of each (chaos.system.ports.PortPlan)
ENGINE_NAME = re.compile(r"^(prefill|decode)(\d*)$")
_SPEC = re.compile(r"^(\d+)p(\d+)d$")
_LINK = re.compile(r"^(bootstrap|control|kv)(\d*)$")


def worker_name(kind: str, index: int) -> str:
    """``kind``'s engine number ``index`` (from 0): ``decode``, ``decode2``."""
    return kind if index == 0 else f"{kind}{index + 1}"


def first_of_kind(name: str) -> str:
    """The first of a kind that ``name`` is one of: ``decode2`` stands for ``decode``, ``kv2``
    for ``kv``; any other name for itself."""
    return name.rstrip("0123456789")


def is_engine(service: str) -> bool:
    """Whether ``service`` names an engine of any topology (``prefill``, ``decode2``)."""
    return ENGINE_NAME.match(service) is not None


def kind_of(engine: str) -> str:
    """``prefill`` or ``decode``, for any engine's name."""
    m = ENGINE_NAME.match(engine)
    if m is None:
        raise ConfigError(f"{engine!r} names no engine (prefill, decode, prefill2, ...)")
    return m.group(1)


def link_of(link: str, engine: str) -> str:
    """The proxy of ``link`` (bootstrap, control, kv) that serves ``engine``: ``kv2`` for decode2."""
    m = ENGINE_NAME.match(engine)
    if m is None:
        raise ConfigError(f"{engine!r} names no engine (prefill, decode, prefill2, ...)")
    return link + m.group(2)


def link_ends(proxy: str) -> tuple[str, ...]:
    """The engines at the two ends of an engine link's proxy: ``bootstrap2`` and ``control2``
    join decode and prefill2, ``kv2`` prefill and decode2 (the first of the other kind stands
    for every one of it)."""
    m = _LINK.match(proxy)
    if m is None:
        raise ConfigError(f"{proxy!r} names no engine link (bootstrap, control, kv, kv2, ...)")
    link, n = m.groups()
    return ("prefill", f"decode{n}") if link == "kv" else (f"prefill{n}", "decode")


@dataclass(frozen=True)
class Topology:
    """``prefills`` prefill and ``decodes`` decode engines behind one router."""

    prefills: int = 1
    decodes: int = 1

    def __post_init__(self) -> None:
        for kind, n in (("prefill", self.prefills), ("decode", self.decodes)):
            if not 1 <= n <= MAX_OF_A_KIND:
                raise ConfigError(f"a stack runs 1 to {MAX_OF_A_KIND} {kind} engines, not {n}")

    @classmethod
    def parse(cls, text: str) -> "Topology":
        """``2p1d`` (case-insensitive): two prefills, one decode."""
        m = _SPEC.match(text.strip().lower())
        if m is None:
            raise ConfigError(f"topology {text!r} is not of the form <n>p<m>d (1p1d, 2p1d, 1p2d, 2p2d)")
        return cls(int(m.group(1)), int(m.group(2)))

    @property
    def name(self) -> str:
        return f"{self.prefills}p{self.decodes}d"

    @property
    def prefill_names(self) -> tuple[str, ...]:
        return tuple(worker_name("prefill", i) for i in range(self.prefills))

    @property
    def decode_names(self) -> tuple[str, ...]:
        return tuple(worker_name("decode", i) for i in range(self.decodes))

    @property
    def engines(self) -> tuple[str, ...]:
        return self.prefill_names + self.decode_names

    def of_kind(self, kind: str) -> tuple[str, ...]:
        return self.prefill_names if kind == "prefill" else self.decode_names

    def __str__(self) -> str:
        return self.name
