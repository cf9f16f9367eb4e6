"""KV corrupted on its way to decode must never be served as a success.

Bug class: silent wrong output with a 200, the failure of highest impact in the field
survey: decode generating from incomplete or corrupted KV (sglang#30233, #22716), a NIXL
failure path returning the previous prompt's answer (vllm#52234). Fault model: one byte
flipped in every TCP segment of the KV with the TCP checksums made right (a bit flip past
every CRC: a NIC, a switch, a host's memory), by the queue handler on a packet link; on
pdsim, whose links are Toxiproxy's, its prefill flips the bytes as it sends them.

Each test runs twice: on the engines as the target configures them (SGLang's KV checksum
is off by default) and with the checksum on (``--disaggregation-enable-kv-checksum``, a
stack of the module's own). Where decode verifies its KV (``kv_verified``), every request
fails cleanly, its status tells the truth, and decode counts a failed transfer; where it
does not, the same corruption serves wrong replies: a strict known issue of SGLang 0.5.23.
"""

from __future__ import annotations

import pytest

from chaos import verdicts as v
from chaos.clients.client import Deadlines
from chaos.observe.pipeline import DECODE_TRANSFER_FAILED, ENGINE_QUEUES, ROUTER_INFLIGHT
from chaos.observe.records import Outcome, Phase
from chaos.run.skips import SkipKind, skip
from chaos.targets.base import Capability

pytestmark = [pytest.mark.fault("network"), pytest.mark.needs("kv_link", "link_corrupt")]

# four 300-word conversations of 48 tokens: about 300 KB of KV each, and a reply long enough
# for the tiny model's to drift once its KV is wrong
CONVERSATION = dict(agents=4, rounds=1, words_per_round=300, max_tokens=48)

SERVES_CORRUPTED_KV = (
    "without --disaggregation-enable-kv-checksum (off by default) decode generates from whatever KV "
    "arrives: bytes of the KV flipped on the wire, under TCP checksums made right, give replies that "
    "differ from the fault-free ones, each with a 200. Evidence: never_served_wrong names the "
    "requests served wrong (sglang-cpu, 2026-12-06, one byte flipped in every TCP segment of the KV: 4 of "
    "4 in each of two runs at 48 tokens; 3 of 3 and 2 of 3 at 32 tokens; 1 of 3 at one segment in five)"
)


@pytest.fixture(scope="module", params=["as_configured", "kv_checksum"])
def engines(request) -> str:
    """How the module's engines treat their KV. A param of its own: one on ``stack`` itself
    would reach the session's stack too, which pytest would then start anew for each."""
    return request.param


@pytest.fixture(scope="module")
def stack(engines, stack_factory, stack):
    """The session's stack as the target configures its engines, then one of the module's
    own with SGLang's KV checksum on both engines."""
    if engines == "as_configured":
        yield stack
        return
    if not stack_factory.choice.sets_engine_options:
        skip(SkipKind.TARGET, f"target {stack_factory.choice.name} cannot start engines with the KV checksum on")
    with stack_factory.own(kv_checksum=True) as target:
        yield target


@pytest.mark.known_issue(
    "never_served_wrong",
    component="SGLang",
    version="0.5.23",
    behaviour=SERVES_CORRUPTED_KV,
    evidence={"wrong": {"between": [1, 4]}},
    lacking="kv_verified",
)
def test_corrupted_kv_is_never_served(scenario, workload, faults, bounds):
    """A reply decoded from corrupted KV must never reach a client as a success: each request
    into the fault fails, or replies as the fault-free baseline did. Where decode verifies the
    KV, each fails cleanly with a status that says what failed, and decode counts a failed
    transfer as soon as the KV has come."""
    deadlines = Deadlines(
        read_s=bounds.waiting_s + bounds.slack_s,
        stall_s=bounds.waiting_s + bounds.slack_s,
        total_s=bounds.router_timeout_s,
    )
    scenario.baseline(**CONVERSATION)
    scenario.judge(
        v.never_served_wrong(phase=Phase.FAULT),  # the integrity verdict
        v.every_request_terminal(within_s=bounds.waiting_s + 2 * bounds.slack_s),
        v.outcomes_in({Outcome.CLEAN_ERROR}, phase=Phase.FAULT),
    )
    if scenario.has(Capability.KV_VERIFIED):
        scenario.judge(
            v.failed_requests_are_clean(within_s=bounds.waiting_s + bounds.slack_s, phase=Phase.FAULT),
            v.statuses_tell_the_truth(),
            v.watchdog_fired("decode KV checksum", DECODE_TRANSFER_FAILED, timeout_s=0, slack_s=bounds.abort_s),
        )
    with faults.corrupt("kv", 1.0):
        workload.conversations(**CONVERSATION, deadlines=deadlines).run()
    scenario.require(v.fault_did("corrupted", why="bytes of the KV flipped on their way to decode"))
    scenario.settle(ENGINE_QUEUES + ROUTER_INFLIGHT, within_s=bounds.quiet_s)
