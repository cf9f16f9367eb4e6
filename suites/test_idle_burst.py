"""Idle, then a burst: the first requests after a quiet spell are served as fast as before it.

Bug class: state that goes stale while nothing is sent. Mooncake 0.3.13.post1's TCP
transport (the one pinned here) rejects the first transfer after about 5 s without one, and
the consumer waits 60 to 90 s (Mooncake#4209); a router idle for hours (sglang#9266); pooled
connections that outlive the backend's keep-alive (sglang#20851: SGLang's HTTP server closes
an idle connection after 5 s, ``SGLANG_TIMEOUT_KEEP_ALIVE``, while smg pooled one for 50 s;
smg 1.13.0 pools one for 3 s, ``--upstream-pool-idle-timeout-secs``, under the 5 s, as its
help says it must be). Fault model: conversations over keep-alive connections fall silent
past each keep-alive and pool expiry in the path, then every agent sends its next round at
once.
Verdicts: every request is served, and each burst's time to first byte stays within one
forward and the machine's slack of the burst sent with no idle before it; nothing leaks and
the stack serves on.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import pytest

from chaos import verdicts as v
from chaos.judge.declare import verdict
from chaos.judge.model import Finding, failed, passed, unknown
from chaos.judge.ops import completed, label
from chaos.observe.history import History
from chaos.observe.phases import fault_spans
from chaos.observe.pipeline import ENGINE_QUEUES, KV_IN_USE, ROUTER_INFLIGHT
from chaos.observe.records import Done, FaultEvent, Outcome, Phase, Stage
from chaos.run.session import IDLE

pytestmark = [pytest.mark.fault("client")]

AGENTS = 4
# past every expiry in the path: SGLang's 5 s keep-alive, httpx's 5 s pool, Mooncake#4209's
# 5 s lanes, smg 1.13.0's 3 s upstream pool (a 55 s idle, past the 50 s pool of the smg before
# it, showed nothing more and cost a minute a run); a nightly run adds a longer one (--idle 10m)
IDLES_S = (6.0,)
REFERENCE = 1  # round 0 warms up, meeting whatever idle came before the test; round 1 follows it at once
GAUGES = ENGINE_QUEUES + KV_IN_USE + ROUTER_INFLIGHT


def _idles(h: History) -> list[tuple[float, float]]:
    """Each idle that ended as (when it began, when it was over), in order."""
    spans = fault_spans((f for f in h.of(FaultEvent) if f.action == "idle"), ends=(Stage.HEALED,))
    return sorted((start, over) for start, over in spans if over != math.inf)


def _first_byte_s(o: Done) -> float | None:
    first = o.complete.first_byte_t
    return None if first is None else first - o.invoke.t


@verdict(
    lambda within_s, reference_round, **_: f"first_bytes_as_fast_after_idle({within_s:g}s of round {reference_round})"
)
def first_bytes_as_fast_after_idle(h: History, within_s: float, *, reference_round: int) -> Finding:
    """Every stream served in a burst after an idle got its first byte within ``within_s`` of
    the slowest first byte of ``reference_round``, the burst sent with no idle before it. A
    burst a failure left with no stream served says nothing of its speed: unknown (its
    failures are ``outcomes_in``'s to judge)."""
    idles = _idles(h)
    if not idles:
        return unknown("no idle in the history")
    served = [o for o in completed(h, None) if o.invoke.stream and o.outcome is Outcome.OK]
    reference = [s for o in served if o.invoke.round == reference_round and (s := _first_byte_s(o)) is not None]
    if not reference:
        return unknown(f"no stream of round {reference_round} was served with a first byte")
    bound = max(reference) + within_s
    ends = [start for start, _ in idles[1:]] + [float("inf")]
    measured: list[tuple[float, Done, float]] = []
    unmeasured = []
    for (start, over), until in zip(idles, ends, strict=True):
        burst = [(s, o) for o in served if over <= o.invoke.t < until and (s := _first_byte_s(o)) is not None]
        if not burst:
            unmeasured.append(f"{over - start:.0f}s")
        measured += [(s, o, over - start) for s, o in burst]
    if unmeasured:
        return unknown(f"no stream served after the idle(s) of {', '.join(unmeasured)}")
    slow = [(s, o, idle) for s, o, idle in measured if s > bound]
    worst = {f"{idle:.0f}s": max(s for s, _, i in measured if i == idle) for idle in sorted({i for *_, i in measured})}
    figures: dict[str, Any] = {"reference_s": max(reference), "bound_s": bound, "worst_after_idle_s": worst}
    if slow:
        shown = "; ".join(f"{label(o)}: {s:.2f}s after {idle:.0f}s idle" for s, o, idle in slow[:4])
        return failed(
            f"{len(slow)} of {len(measured)} streams after an idle began later than {bound:.2f}s: {shown}",
            ops=[o.invoke.op for _, o, _ in slow],
            **figures,
        )
    return passed(
        f"{len(measured)} streams after {len(idles)} idle(s), slowest first byte {max(s for s, *_ in measured):.2f}s "
        f"(round {reference_round}: {max(reference):.2f}s)",
        stake=len(measured),
        **figures,
    )


def test_a_burst_after_idle_is_served_as_fast_as_before(scenario, workload, faults, bounds, pytestconfig):
    """Four agents, each on its keep-alive connection, send a round together: a warm-up, a
    reference right after it, then one after each idle. Every request is served, each
    burst's streams begin as soon as the reference's did (one forward and the slack more),
    and the engines and router hold nothing once it is over."""
    longer = pytestconfig.stash[IDLE]
    idles = [*IDLES_S, *([longer] if longer else [])]
    scenario.judge(
        v.outcomes_in(set(), phase=Phase.FAULT),
        first_bytes_as_fast_after_idle(bounds.forward_s + bounds.slack_s, reference_round=REFERENCE),
    )
    before = dict(zip(itertools.count(REFERENCE + 1), idles))

    def between(rnd: int) -> None:
        if rnd in before:
            with faults.idle(before[rnd]):
                pass

    convo = workload.conversations(agents=AGENTS, rounds=REFERENCE + 1 + len(idles), words_per_round=20)
    convo.run_in_step(between)
    scenario.settle(GAUGES, within_s=bounds.quiet_s)
