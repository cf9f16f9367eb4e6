"""Under high concurrency no request may receive another request's output.

Bug class: cross-request KV contamination (a bootstrap_room / metadata mix-up, #32564;
vLLM's and SGLang's contamination canaries). Fault model: load alone, 32 requests at once.
The canary is the reply itself: with deterministic decoding, a reply must equal the reply
to the same context in a sequential, fault-free baseline, and say truthfully why it ended.
"""

from __future__ import annotations

import pytest

from chaos import verdicts as v
from chaos.observe.records import Phase

pytestmark = [pytest.mark.fault("load")]


def _body(workload, i: int) -> dict:
    return workload.chat(f"canary {i}: " + "quartz " * (i % 7), max_tokens=12, ignore_eos=True)


def test_concurrent_replies_equal_their_sequential_baseline(scenario, workload):
    n = 32
    scenario.judge(v.outcomes_in(set()), v.replies_match_baseline(), v.finish_reasons_tell_the_truth())
    for i in range(n):
        workload.request("/v1/chat/completions", _body(workload, i), phase=Phase.BASELINE)
    workload.background([_body(workload, i) for i in range(n)], phase=Phase.FAULT).join()
