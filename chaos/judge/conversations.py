"""Multi-round conversations: each prompt longer than the last."""

from __future__ import annotations

import itertools

from chaos.judge.declare import verdict
from chaos.judge.model import Finding, failed, passed, unknown
from chaos.judge.ops import completed
from chaos.observe.history import History
from chaos.observe.records import Done, Outcome

__all__ = ["context_grows"]


@verdict(lambda **_: "context_grows")
def context_grows(h: History) -> Finding:
    """Per agent of each conversation, each successful round's prompt is longer than the
    previous one's: no turn was silently dropped. Two conversations each have an agent0: an
    agent is known by its workload and phase as well as its name."""
    by_agent: dict[tuple[str, str, str], list[Done]] = {}
    for o in completed(h, None):
        if o.invoke.agent and o.outcome is Outcome.OK:
            by_agent.setdefault((o.invoke.workload, o.invoke.phase, o.invoke.agent), []).append(o)
    if not by_agent:
        return unknown("no conversation in the history")
    bad, ops = [], []
    for (_, phase, agent), done in by_agent.items():
        done.sort(key=lambda o: o.invoke.round)
        tokens = [o.complete.prompt_tokens for o in done]
        counted = [t for t in tokens if t is not None]
        if len(counted) < len(tokens):
            return unknown(f"{agent} replies carry no prompt_tokens")
        for (prev, cur), op in zip(itertools.pairwise(counted), done[1:], strict=True):
            if cur <= prev:
                bad.append(f"{agent} ({phase}) round {op.invoke.round}: prompt_tokens {cur} after {prev}")
                ops.append(op.invoke.op)
    if bad:
        return failed("; ".join(bad[:5]), ops=ops, shrunk=len(bad))
    rounds = sum(len(done) - 1 for done in by_agent.values())  # each round after an agent's first could shrink
    return passed(
        f"{len(by_agent)} conversations, prompts strictly growing over {rounds} later rounds",
        stake=rounds,
        conversations=len(by_agent),
    )
