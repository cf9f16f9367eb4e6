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
from chaos.history import Phase

pytestmark = [pytest.mark.fault("network"), pytest.mark.needs("proxied_bootstrap")]

STREAMS = 3
LONG_REPLY = 500  # tokens: at 10 ms a step on pdsim, 5 s of decoding, over two heartbeats


def test_stalled_bootstrap_link_does_not_stall_running_streams(scenario, workload, faults, bounds):
    patient = bounds.patient(stall_s=bounds.recovery_s)
    scenario.judge(
        v.stream_gaps_at_most(
            bounds.slack_s, phase=Phase.FAULT, why="their handshake was done before the link stalled"
        ),
        v.outcomes_in(set(), phase=Phase.FAULT),
    )
    bodies = [workload.chat(f"story {i}", max_tokens=LONG_REPLY, ignore_eos=True, stream=True) for i in range(STREAMS)]
    streams = workload.background(bodies, deadlines=patient)
    # smg's count at the decode worker is prompt on every engine (SGLang's own gauges lag)
    with faults.blackhole("bootstrap", stream="upstream", when=scenario.requests_at("decode") >= STREAMS):
        streams.join()
