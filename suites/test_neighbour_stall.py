"""A stalled bootstrap link must not stall the streams that do not need it.

Bug class: a blocking call on the PD handshake path inside decode's scheduler: while one
call to prefill's bootstrap server hangs, every stream on that decode stops producing
tokens, up to about 75 s (sglang PR #34865). Fault model: Toxiproxy blackholes the
bootstrap link (route info and heartbeats) while streams whose handshake is done are
under way; the trigger is smg counting all of them at the decode worker. Verdicts: no healthy stream goes
longer than the slack without a token, and every one of them finishes.
"""

from __future__ import annotations

import pytest

from chaos import verdicts as v
from chaos.history import History, Phase
from chaos.judge.declare import verdict
from chaos.judge.model import Finding, unknown
from chaos.judge.ops import all_within, scope

pytestmark = [pytest.mark.fault("network"), pytest.mark.needs("proxied_bootstrap")]

STREAMS = 3
LONG_REPLY = 500  # tokens: at 10 ms a step on pdsim, 5 s of decoding, over two heartbeats


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


def test_stalled_bootstrap_link_does_not_stall_running_streams(scenario, workload, faults, bounds):
    patient = bounds.patient(stall_s=bounds.recovery_s)
    scenario.judge(
        stream_gaps_at_most(bounds.slack_s, phase=Phase.FAULT, why="their handshake was done before the link stalled"),
        v.outcomes_in(set(), phase=Phase.FAULT),
    )
    bodies = [workload.chat(f"story {i}", max_tokens=LONG_REPLY, ignore_eos=True, stream=True) for i in range(STREAMS)]
    streams = workload.background(bodies, deadlines=patient)
    # smg's count at the decode worker is prompt on every engine (SGLang's own gauges lag)
    with faults.blackhole("bootstrap", stream="upstream", when=scenario.requests_at("decode") >= STREAMS):
        streams.join()
