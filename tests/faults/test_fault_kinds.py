"""A fault knows what it means (issue 40): one declaration per kind (``chaos.faults.kinds``),
read by the verdicts and by explore. Change one kind and everything that judges or schedules
by it follows; no table of its own elsewhere stays behind."""

from __future__ import annotations

import pytest

from chaos import verdicts as v
from chaos.explore.invariants import CUT_BY
from chaos.explore.render import render
from chaos.explore.schedule import Load, Schedule, Step, Strike, cuts, primary_path
from chaos.faults import kinds
from chaos.faults.kinds import CUT_OUTCOMES, KINDS, Kind
from chaos.observe.history import History
from chaos.observe.records import Chunk, Complete, FaultEvent, Invoke, Outcome, Stage


def _served_through(action: str) -> History:
    """A stream decode went on serving to a plain success, 2 s after ``action`` struck it."""
    h = History()
    h.append(FaultEvent(1.0, 0.0, "f#1", Stage.INJECT, f"{action} decode", implicates=("decode",), action=action))
    h.append(FaultEvent(1.1, 0.0, "f#1", Stage.VERIFIED, f"{action} decode", implicates=("decode",), action=action))
    h.append(Invoke(0.0, 0.0, "s", "/v1/chat/completions", True))
    for i in range(2, 31):
        h.append(Chunk(i / 10, "s", 10))
    h.append(Complete(3.01, 0.0, "s", Outcome.OK, 200, "", "text", 5, 8, first_byte_t=0.2))
    return h


def _killed_decode() -> Schedule:
    return Schedule(1, 0, "embedded", (Step(Load("streams", 2), Strike("kill", "decode")),))


def test_explore_and_the_verdicts_read_the_one_declaration(monkeypatch: pytest.MonkeyPatch) -> None:
    assert v.no_hidden_fault()(_served_through("kill")).status is v.Status.FAIL
    assert "decodes_ended=('decode',)" in render(_killed_decode())
    kv_down = Strike("down", "kv")
    assert primary_path(kv_down) and cuts([Strike("blackhole", "client_router")]) == ("link",)
    assert CUT_BY is CUT_OUTCOMES

    # declare that a kill does not end what decode serves, a kv link down is no primary
    # path, and a client link cut nothing: the verdict, the renderer and the scheduler follow
    monkeypatch.setitem(KINDS, "kill", Kind(cuts={"router": "router_killed"}))
    monkeypatch.setitem(KINDS, "down", Kind())
    monkeypatch.setitem(KINDS, "blackhole", Kind())
    assert v.no_hidden_fault()(_served_through("kill")).status is v.Status.NOT_AT_STAKE
    assert "decodes_ended" not in render(_killed_decode())
    assert not primary_path(kv_down) and cuts([Strike("blackhole", "client_router")]) == ()


def test_every_strike_explore_draws_is_a_declared_kind() -> None:
    from chaos.explore.schedule import strikes_for
    from chaos.targets.base import Capability

    drawn = {s.action for s in strikes_for(frozenset(Capability))}
    assert drawn <= set(KINDS), drawn - set(KINDS)
    assert {c for k in KINDS.values() for c in k.cuts.values()} == set(CUT_OUTCOMES)
    assert kinds.ends_serving() == {"kill", "restart", "abort_all"}
