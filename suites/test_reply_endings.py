"""Replies that end on their own: each where its stop string or its length says, the first
token (sampled on prefill, handed to decode with the KV) included.

Bug class: finish criteria not applied at the PD hand-off. Decode receives the first token
from prefill and must check it like any other: a length of one, an end-of-sequence token or
a stop string may already end the reply there. Missed, decode generates past it (SGLang
PR #7147: ``max_new_tokens`` 1 gave 2 tokens in PD; TensorRT-LLM PR #16691 and Dynamo PR
#13442: the end id, the length and the stop words at the first-token hand-off).

Fault model: load alone, every ending asked at once. The model may end replies itself
(``ignore_eos`` off everywhere). The reference is each context's fault-free reply, asked one
at a time: its full reply, and its first token alone (``max_tokens`` 1). The stop strings are
read off those replies, so the oracle holds on any model: one inside the first token (the
first character that is not a space), one past it.
Verdicts: each reply ends where asked (``replies_end_where_asked``), every finish reason
agrees with its token count (``finish_reasons_tell_the_truth``), nothing fails.
"""

from __future__ import annotations

from typing import NamedTuple, Sequence

import pytest

from chaos import verdicts as v
from chaos.clients.client import context_of
from chaos.clients.workloads import stop_string_in
from chaos.judge.declare import verdict
from chaos.judge.model import Finding, failed, passed, unknown
from chaos.judge.ops import completed, label
from chaos.observe.history import History
from chaos.observe.records import Done, Outcome, Phase

pytestmark = [pytest.mark.fault("load")]

CONTEXTS = 4
MAX_TOKENS = 16
STOP_LEN = 3  # a stop string past the first token: three characters the reply holds there first


class Ending(NamedTuple):
    """One request judged against its context's references, each named by its context
    digest (``chaos.clients.client.context_of``): the full reply and the first token alone.
    ``stop`` is the stop string it asked for; without one, it asked for one token."""

    asked: str
    full: str
    first: str
    stop: str | None


def _expected(ending: Ending, full: Done, first: Done) -> tuple[str, str, tuple[int, int]] | str:
    """The reply, finish reason and token count range ``ending`` must get, or why the
    references cannot say."""
    if not full.complete.reply.startswith(first.complete.reply):
        return "its full reply does not begin with its first token"
    if ending.stop is None:
        return first.complete.reply, first.complete.finish, (1, 1)
    cut = full.complete.reply.find(ending.stop)
    if cut < 0:
        return f"its full reply does not hold the stop string {ending.stop!r}"
    tokens = full.complete.completion_tokens or MAX_TOKENS
    inside_first = cut + len(ending.stop) <= len(first.complete.reply)
    return full.complete.reply[:cut], "stop", (1, 1) if inside_first else (2, tokens)


def _miss(o: Done, reply: str, finish: str, least: int, most: int) -> str:
    """How ``o`` ended otherwise than asked ("" if it did not)."""
    n = o.complete.completion_tokens
    said = []
    if o.complete.reply != reply:
        said.append(f"reply {o.complete.reply[:40]!r}, expected {reply[:40]!r}")
    if o.complete.finish != finish:
        said.append(f"finish {o.complete.finish!r}, expected {finish!r}")
    if n is None or not least <= n <= most:
        said.append(f"{n} tokens, expected {least}" + (f" to {most}" if most > least else ""))
    return "; ".join(said)


Miss = tuple[Done, str | None, str]  # the request, the stop string it asked for, how it ended otherwise


@verdict(lambda endings, **_: f"replies_end_where_asked({len(endings)} endings)")
def replies_end_where_asked(h: History, endings: Sequence[Ending], *, phase: Phase = Phase.FAULT) -> Finding:
    """The references asked for one token got one, and every successful request of
    ``phase`` that an ending names got the reply its references say: cut before the first
    place its stop string appears in the full reply, finished by ``stop``, in one token when
    the stop string lies in the first token and in at least two otherwise (never more than
    the full reply took); asked for one token, the first token's reply, finish and count.
    SGLang cuts the matched stop string from the text (``trim_matched_stop``)."""
    ok = [o for o in completed(h, None) if o.outcome is Outcome.OK]
    by_context = {o.invoke.context: o for o in ok if o.invoke.phase is Phase.BASELINE}
    asked = [o for o in ok if o.invoke.phase is phase]
    ends = [Ending(*e) for e in endings]
    firsts = {by_context[e.first].invoke.op: by_context[e.first] for e in ends if e.first in by_context}
    # a reference asked for one token is an ending too; one that got more says nothing of its stops
    wrong: list[Miss] = [
        (f, None, f"{f.complete.completion_tokens} tokens, expected 1")
        for f in firsts.values()
        if f.complete.completion_tokens != 1
    ]
    judged, blind = len(firsts), []
    for ending in ends:
        full, first = by_context.get(ending.full), by_context.get(ending.first)
        if full is None or first is None:
            blind.append(f"no reference reply for {ending.stop!r}")
            continue
        want = _expected(ending, full, first) if first.complete.completion_tokens == 1 else None
        if isinstance(want, str):
            blind.append(f"{label(first)}: {want}")
        if not isinstance(want, tuple):
            continue
        mine = [o for o in asked if o.invoke.context == ending.asked]
        judged += len(mine)
        wrong += [(o, ending.stop, miss) for o in mine if (miss := _miss(o, want[0], want[1], *want[2]))]
    if wrong:
        return failed(
            f"{len(wrong)} of {judged} replies did not end where asked: "
            + "; ".join(f"{label(o)} (stop {stop!r}) {said}" for o, stop, said in wrong[:3]),
            ops=[o.invoke.op for o, _, _ in wrong],
            wrong=len(wrong),
            of=judged,
            stops=[stop for _, stop, _ in wrong[:8]],
        )
    if blind:
        return unknown("; ".join(blind[:3]), of=judged, blind=len(blind))
    if judged == len(firsts):
        return unknown(f"no successful request of phase {Phase(phase).value!r} is an ending judged")
    return passed(f"{judged} replies ended where asked", stake=judged, of=judged)


def test_replies_end_where_their_stop_or_length_says(scenario, workload):
    contexts = [f"endings {i}: " + "cedar " * (i + 1) for i in range(CONTEXTS)]
    endings: list[Ending] = []
    asked: list[dict] = []
    for text in contexts:
        full_body = workload.chat(text, max_tokens=MAX_TOKENS)
        first_body = workload.chat(text, max_tokens=1)
        full = workload.request("/v1/chat/completions", full_body, phase=Phase.BASELINE)
        first = workload.request("/v1/chat/completions", first_body, phase=Phase.BASELINE)
        asked.append(first_body)
        endings.append(Ending(context_of(first_body), context_of(full_body), context_of(first_body), None))
        if not (full.ok and first.ok):
            continue  # its ending has no reference: the verdict is unknown, never a pass
        in_first = next((c for c in first.reply if not c.isspace()), None)
        past_first = stop_string_in(full.reply, after=max(len(first.reply), len(full.reply) // 2), length=STOP_LEN)
        for stop in (s for s in (in_first, past_first) if s):
            body = workload.chat(text, max_tokens=MAX_TOKENS, stop=[stop])
            asked.append(body)
            endings.append(Ending(context_of(body), context_of(full_body), context_of(first_body), stop))
    scenario.judge(
        v.outcomes_in(set(), phase=Phase.FAULT),
        v.finish_reasons_tell_the_truth(),
        replies_end_where_asked(endings),
    )
    workload.background(asked, phase=Phase.FAULT).join()
