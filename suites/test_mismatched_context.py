"""Mismatched context lengths: a request one engine takes and the other refuses as too long
fails at once, with an error that names the context length, and the engines serve on.

Bug class: engines deployed with different settings that the PD handshake does not compare
(sglang#14474, sglang#30233: mismatches that hung until a timeout). SGLang 0.5.23 checks each
request against its own ``--context-length`` in the tokenizer manager
(``_validate_one_request``), before the request reaches the PD machinery; in a PD pair each
engine checks alone, and the one that took the request goes on to wait for a peer that never
comes. Fault model: a stack of the module's own per side, whose prefill or decode starts with
a context of 256 tokens, the other engine with the model's; streams of a prompt longer than
256 tokens and far inside the other's. Verdicts: every stream fails within one forward and
the machine's slack, its error naming the context length; every process stays up; the engine
that took the request lets it go within its own PD timeout (prefill's bootstrap timeout when
decode refused, decode's waiting timeout when prefill did), and a short request is served
after.
"""

from __future__ import annotations

import pytest

from chaos import verdicts as v
from chaos.observe.pipeline import ENGINE_QUEUES, ROUTER_INFLIGHT
from chaos.observe.records import Phase
from chaos.run.skips import SkipKind, skip
from suites.test_mismatched_engines import SERVICES, refused_naming_the_mismatch

pytestmark = [pytest.mark.fault("engine")]

SHORT = 256  # tokens: the shorter engine's --context-length
WORDS = 600  # the prompt: past SHORT on either engine's tokenizer, far inside the model's 16384 (pdsim's 32768)
STREAMS = 4
NAMES_THE_MISMATCH = ("context length",)


@pytest.fixture(scope="module", params=["decode", "prefill"])
def shorter(request) -> str:
    """The engine that starts with the shorter context."""
    return request.param


@pytest.fixture(scope="module")
def stack(stack_factory, shorter):
    """A stack of the module's own whose ``shorter`` engine takes at most SHORT tokens."""
    if not stack_factory.choice.sets_engine_options:
        skip(SkipKind.TARGET, f"target {stack_factory.choice.name} cannot start an engine with a context of its own")
    with stack_factory.own(context_length={shorter: SHORT}) as target:
        yield target


def test_a_prompt_one_engine_cannot_take_fails_at_once(scenario, workload, faults, bounds, shorter):
    """Streams too long for the shorter engine, one after another: each fails at once naming
    the context length, and the other engine's leg of each is let go by its own PD timeout."""
    scenario.watch_processes(*SERVICES)
    # the engine that took the request waits for its peer until its own backstop
    held_s = (bounds.bootstrap_s if shorter == "decode" else bounds.waiting_s) + bounds.slack_s
    scenario.judge(
        refused_naming_the_mismatch(bounds.forward_s + bounds.slack_s, phase=Phase.FAULT, words=NAMES_THE_MISMATCH),
        v.stayed_up(SERVICES),
    )
    long = "too long " + "word " * WORDS
    bodies = [workload.chat(f"{i} {long}", max_tokens=8, ignore_eos=True, stream=True) for i in range(STREAMS)]
    with faults.mismatched_context(shorter):
        workload.background(bodies, deadlines=bounds.patient(), interval_s=0.2).join()
    scenario.settle(ENGINE_QUEUES + ROUTER_INFLIGHT, within_s=held_s)
