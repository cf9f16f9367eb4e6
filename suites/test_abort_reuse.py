"""Aborts in the middle of KV transfers, and the pages they free taken at once by others:
every reply served must still be the reply to its own context.

Bug class: KV pages freed on abort while the aborted transfer still writes into them, and
handed to the next request, which then decodes from another request's KV: silent wrong
output, the worst outcome (#24527, #27372; a public EKS report found 8 of 42 replies served
from freed blocks). Fault model: the KV link is slowed so that transfers take seconds;
impatient clients hang up mid-transfer, and once decode has let their rooms go, patient
ones, with contexts a fault-free baseline answered, arrive at once and take the freed
pages. Verdicts: every successful reply equals its baseline, every patient request
succeeds, nothing leaks. The link must be proxied to make the transfer window (Mooncake's
KV on real SGLang is not: it skips with that reason).
"""

from __future__ import annotations

import pytest

from chaos import verdicts as v
from chaos.clients.client import Deadlines
from chaos.observe.pipeline import DECODE_TRANSFER_QUEUE, ENGINE_QUEUES, ROUTER_INFLIGHT
from chaos.observe.records import Outcome, Phase
from chaos.observe.triggers import quiet

pytestmark = [pytest.mark.fault("client"), pytest.mark.needs("kv_link")]

IMPATIENT, PATIENT = 2, 6
LONG_PROMPT = 400  # words: on pdsim both forward in 0.8 s, well before their clients hang up (bounds.forward_s)
SLOW_KV_KB_S = 50  # per transfer: an impatient prompt's KV (about 400 KB on pdsim) crosses in about 8 s
DECODING = 400  # tokens: the patient wave decodes for about 5 s on pdsim, while the aborted KV still crosses


def _patient(workload, i: int) -> dict:
    return workload.chat(f"canary {i}: " + "amber " * (i % 5), max_tokens=DECODING, ignore_eos=True)


def test_pages_freed_by_aborts_serve_only_their_new_owner(scenario, workload, faults, bounds):
    patient = Deadlines(read_s=bounds.router_timeout_s, total_s=bounds.router_timeout_s)
    scenario.judge(v.replies_match_baseline(), v.outcomes_in(set(), phase=Phase.AFTER))
    workload.background([_patient(workload, i) for i in range(PATIENT)], deadlines=patient).join()
    impatient = bounds.impatient(read_s=bounds.forward_s, total_s=bounds.forward_s + 0.5)  # gone while their KV crosses
    with faults.bandwidth("kv", SLOW_KV_KB_S, stream="upstream"):
        workload.background(
            [workload.chat(f"{i} " + "long " * LONG_PROMPT, max_tokens=4) for i in range(IMPATIENT)],
            deadlines=impatient,
        ).join()
        faults.wait(quiet([DECODE_TRANSFER_QUEUE]))  # decode has let the aborted rooms go: their pages are free
        # and taken at once, while the aborted KV still crosses
        workload.background(
            [_patient(workload, i) for i in range(PATIENT)], phase=Phase.AFTER, deadlines=patient
        ).join()
    scenario.require(
        v.ended_as(Outcome.CLIENT_TIMEOUT, phase=Phase.FAULT, why="every impatient client hung up before its reply")
    )
    scenario.settle(ENGINE_QUEUES + ROUTER_INFLIGHT, within_s=bounds.abort_s)
