"""``chaos.judge.conversations``: each check passes on a good history and fails (or is unknown)
on a crafted bad one, histories written by hand."""

from __future__ import annotations

from chaos import verdicts as v
from chaos.observe.history import History
from chaos.observe.records import Complete, Invoke, Outcome, Phase
from tests.judge.histories import op, status


def test_context_grows():
    check = v.context_grows()
    good, shrunk = History(), History()
    for h, tokens in ((good, (100, 200, 300)), (shrunk, (100, 200, 150))):
        for rnd, n in enumerate(tokens):
            op(h, f"o{rnd}", rnd, rnd + 0.5, agent="agent0", rnd=rnd, prompt=n)
    assert status(check, good) is v.Status.PASS
    assert status(check, shrunk) is v.Status.FAIL and "prompt_tokens 150 after 200" in check(shrunk).message


def test_two_conversations_in_one_phase_each_have_their_own_agent0():
    """Found by `make explore` (seed 1, episode 2): two conversations sent one after the
    other, in one phase, were judged as one agent0 whose context shrank."""
    h = History()
    for conversation in ("conversations#1", "conversations#2"):
        for rnd, n in enumerate((52, 159)):
            name = f"{conversation}/{rnd}"
            h.append(Invoke(rnd, 0.0, name, "/v1/chat/completions", True, "agent0", rnd, "", Phase.FAULT, conversation))
            h.append(Complete(rnd + 0.5, 0.0, name, Outcome.OK, 200, "", "r", n, 2))
    judged = v.context_grows()(h)
    assert judged.status is v.Status.PASS and judged.evidence.values["conversations"] == 2, judged.message


def test_a_failed_round_is_not_a_round_and_an_equal_prompt_did_not_grow():
    h = History()
    for rnd, prompt, outcome in ((0, 10, Outcome.OK), (1, None, Outcome.CLEAN_ERROR), (2, 20, Outcome.OK)):
        op(h, f"r{rnd}", rnd, rnd + 0.5, outcome, agent="agent0", rnd=rnd, prompt=prompt)
    assert v.context_grows()(h).status is v.Status.PASS
    op(h, "r3", 3.0, 3.5, agent="agent0", rnd=3, prompt=20)
    assert v.context_grows()(h).status is v.Status.FAIL
