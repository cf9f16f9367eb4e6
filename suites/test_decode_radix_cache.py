"""A multi-turn conversation on a decode that caches its KV prefixes, across a decode
restart: every reply equals the reply its context gets from prefill's KV alone.

Bug class: decode's radix cache (SGLang's ``--disaggregation-decode-enable-radix-cache``,
PR #19746) keeps a conversation's KV and asks prefill only for the new turn's tokens (the
``decode_prefix_len`` of its metadata). A slip in joining the cached prefix and the
transferred delta decodes from the wrong KV: a wrong reply, silently, on exactly the turns
the cache serves (#24230: ``out_cache_loc`` sliced wrong when the cached prefix is not
empty; #30322). A decode restart empties the cache mid-conversation: the next turn must be
served from prefill's KV in full, the ones after from the cache again.

Fault model: on a stack of this module's own with decode's radix cache on (every target
pd-chaos starts, Compose and GPU included; an attached deployment skips), one agent's conversation of several
rounds; decode restarted between two rounds, prefill's cache flushed before each (so that what
decode reports as cached is its own reuse). The reference is the same conversation with
both caches flushed before every round: no reply of it comes from a cache.
Verdicts: every reply equals its reference, every round is answered (the first after the
restart may be retried while smg finds decode again), any failed attempt failed cleanly. Premise: decode reused a cached
prefix in the rounds judged.
"""

from __future__ import annotations

import pytest

from chaos import verdicts as v
from chaos.judge.declare import premise, verdict
from chaos.judge.logs import log_lines
from chaos.judge.model import Finding, failed, met, nothing_at_stake, passed, unmet
from chaos.judge.ops import completed, scope
from chaos.observe.history import History
from chaos.observe.records import Outcome, Phase
from chaos.run.skips import SkipKind, skip

pytestmark = [pytest.mark.fault("process"), pytest.mark.needs("process_control")]

CONVERSATION = {"agents": 1, "rounds": 5, "max_tokens": 16, "words_per_round": 30}
RESTART_BEFORE = 3  # decode restarts before this round: rounds 1-2 and 4 are served from its cache


@premise(lambda service, phase, **_: f"prefix_reused({service}, {Phase(phase).value})")
def prefix_reused(h: History, service: str, *, phase: Phase, why: str) -> Finding:
    """Premise: ``service`` served at least one request of ``phase`` from a cached prefix:
    its finish line for the request reports ``cached_tokens`` above 0 (SGLang's ``Finish:``
    meta_info, pdsim's finished line). On decode that count includes prefill's own cache
    hits (SGLang 0.5.23 seeds it with them), so a scenario proving decode's reuse flushes
    prefill's cache first."""
    ops = {o.invoke.op for o in completed(h, phase)}
    reused: dict[str, int] = {}
    for ev in log_lines(h, service, ops):
        if (n := int(ev.fields.get("cached_tokens") or 0)) > 0:
            reused[ev.op] = max(reused.get(ev.op, 0), n)
    if not reused:
        return unmet(f"no log line of {service} shows a cached prefix for the {len(ops)} requests ({why})")
    return met(
        f"{len(reused)} of {len(ops)} requests served from a cached prefix, up to {max(reused.values())} tokens",
        ops=list(reused),
        cached_tokens=reused,
    )


@verdict(lambda rounds, phase, **_: f"conversations_finish({rounds} rounds, {Phase(phase).value})")
def conversations_finish(h: History, rounds: int, *, phase: Phase) -> Finding:
    """Every agent of ``phase`` got a successful reply in each of its ``rounds`` rounds
    (after its retries): no conversation was given up."""
    done: dict[str, set[int]] = {}
    for o in scope(h, phase):
        if o.invoke.agent:
            done.setdefault(o.invoke.agent, set()).update({o.invoke.round} if o.outcome is Outcome.OK else set())
    if not done:
        return nothing_at_stake(f"no conversation in phase {Phase(phase).value!r}")
    short = {agent: sorted(set(range(rounds)) - got) for agent, got in done.items() if len(got) < rounds}
    if short:
        return failed(
            "; ".join(f"{agent} has no reply for round(s) {missing}" for agent, missing in sorted(short.items())),
            unanswered=short,
        )
    return passed(
        f"{len(done)} agent(s), every one of {rounds} rounds answered", stake=len(done) * rounds, agents=len(done)
    )


@pytest.fixture(scope="module")
def stack(stack_factory):
    """This module's stack: decode with its radix cache."""
    if not stack_factory.choice.starts_stacks:
        skip(
            SkipKind.TARGET,
            "decode's radix cache is switched on by the targets pd-chaos starts, not on an attached deployment",
        )
    with stack_factory.own(decode_radix_cache=True) as target:
        yield target


@pytest.mark.smoke
def test_replies_from_the_decode_cache_equal_their_reference_across_a_decode_restart(
    scenario, workload, faults, bounds
):
    def uncached(rnd: int) -> None:  # the reference: neither engine's cache serves any of it
        scenario.flush_cache("prefill")
        scenario.flush_cache("decode")

    def decode_cache_only(rnd: int) -> None:
        # prefill's cache flushed, so that the cached tokens decode reports are its own reuse
        scenario.flush_cache("prefill")
        if rnd == RESTART_BEFORE:
            with faults.restart("decode"):
                pass  # restarted and ready when the block is entered; its cache is empty

    scenario.baseline(**CONVERSATION, before_each=uncached)

    scenario.judge(
        v.replies_match_baseline(),
        conversations_finish(CONVERSATION["rounds"], phase=Phase.FAULT),
        v.outcomes_in(
            {Outcome.CLEAN_ERROR, Outcome.CONNECTION_ERROR}, phase=Phase.FAULT
        ),  # attempts retried after the restart
    )
    # the first round after the restart may meet smg before it has found decode again
    workload.conversations(**CONVERSATION, before_each=decode_cache_only,
                           retries=int(bounds.recovery_s), retry_wait_s=1.0, retry_on=frozenset({Outcome.CLEAN_ERROR, Outcome.CONNECTION_ERROR})).run()  # fmt: skip
    scenario.require(prefix_reused("decode", phase=Phase.FAULT, why="decode's radix cache served no prefix"))
