"""Whether streams kept flowing: the longest wait between two chunks of each."""

from __future__ import annotations

from chaos.history import History, Phase
from chaos.judge.declare import verdict
from chaos.judge.model import Finding, unknown
from chaos.judge.ops import all_within, scope

__all__ = ["stream_gaps_at_most"]


@verdict(lambda gap_s, phase, why, **_: f"stream_gaps_at_most({gap_s:g}s, {Phase(phase).value}: {why})")
def stream_gaps_at_most(h: History, gap_s: float, *, phase: Phase, why: str) -> Finding:
    """In every stream of ``phase``, no two consecutive chunks are more than ``gap_s``
    apart: its tokens kept flowing (whatever stalled elsewhere did not stall it). The wait
    for the first chunk is not a gap: prefill and the transfer come before it."""
    streams = [o for o in scope(h, phase) if o.invoke.stream and len(o.chunks) >= 2]
    if not streams:
        return unknown(f"no stream of phase {Phase(phase).value!r} with two chunks or more")
    worst = [(max(b.t - a.t for a, b in zip(o.chunks, o.chunks[1:])), o) for o in streams]
    return all_within(
        worst,
        gap_s,
        over="streams stalled",
        each="{:.2f}s without a chunk",
        shown="{n} streams, longest gap {worst:.2f}s",
    )
