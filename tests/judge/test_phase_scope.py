"""A verdict scoped to a phase judges that phase's requests and nothing else.

Metamorphic: judged with ``phase=baseline`` on a history whose fault phase breaks every
claim, a check finds what it finds, figure for figure, on the same history with the fault
phase's requests left out. And so that this can fail for each of them: judged with
``phase=fault`` on that history, each check finds otherwise (another status or other figures) (mutation testing found checks
whose ``phase`` could be dropped unnoticed).
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any, Callable

import pytest

from chaos import verdicts as v
from chaos.judge.declare import DECLARED, Check
from chaos.judge.premises import ended_as, open_at_fault, requests_affected
from chaos.observe.history import History
from chaos.observe.logs import parse_engine_line
from chaos.observe.records import Chunk, Complete, FaultEvent, Invoke, LogEvent, Outcome, Phase, Sample, Stage
from chaos.observe.sampler import HEALTH

# Each check of chaos.judge that takes a phase, made for one.
SCOPED: dict[str, Callable[[Phase], Check]] = {
    "every_request_terminal": lambda p: v.every_request_terminal(within_s=5, phase=p),
    "failed_requests_are_clean": lambda p: v.failed_requests_are_clean(phase=p),
    "outcomes_in": lambda p: v.outcomes_in({Outcome.OK}, phase=p),
    "status_agrees_with_body": lambda p: v.status_agrees_with_body(phase=p),
    "statuses_tell_the_truth": lambda p: v.statuses_tell_the_truth(phase=p),
    "valid_requests_served": lambda p: v.valid_requests_served(phase=p),
    "finish_reasons_tell_the_truth": lambda p: v.finish_reasons_tell_the_truth(phase=p),
    "never_served_wrong": lambda p: v.never_served_wrong(phase=p),
    "health_tells_truth": lambda p: v.health_tells_truth("decode", phase=p),
    "backstops_stay_idle": lambda p: v.backstops_stay_idle(phase=p),
    "requests_affected": lambda p: requests_affected(phase=p, why="test"),
    "ended_as": lambda p: ended_as(Outcome.CLIENT_TIMEOUT, phase=p, why="test"),
    "open_at_fault": lambda p: open_at_fault(phase=p, why="test"),
}


def _request(events: list[Any], name: str, t: float, phase: Phase, end: Complete, **invoke: Any) -> None:
    events.append(Invoke(t, 0.0, name, "/v1/chat/completions", True, phase=phase, max_tokens=8, **invoke))
    if end.first_byte_t is not None:
        events.append(Chunk(end.first_byte_t, name, 10))
    events.append(end)
    line = f"rid={name} state={'finished' if end.outcome is Outcome.OK else 'failed'}"
    events.append(LogEvent(t + 0.1, "decode", line, op=name, fields={"rid": name, "state": "finished"}))


def _events() -> list[Any]:
    """Two requests served well in the baseline; in the fault phase (decode killed at 2 s),
    a client timeout with no byte after 30 s, a 200 with an empty body (the first baseline
    context's, whose reply was not empty) that claims 5 tokens and a finish of ``stop`` under
    ignore_eos, a truncated stream, a room released by
    decode's waiting timeout; decode's /health said 200 all along."""
    events: list[Any] = []
    for i, t in enumerate((0.0, 0.5)):
        _request(
            events,
            f"b{i}",
            t,
            Phase.BASELINE,
            Complete(t + 0.3, 0.0, f"b{i}", Outcome.OK, 200, "", "r", 8, 8, t + 0.1, "length"),
            context=f"c{i}",
        )
    events.append(FaultEvent(2.0, 0.0, "kill#1", Stage.INJECT, "SIGKILL decode", implicates=("decode",)))
    _request(events, "f0", 1.5, Phase.FAULT, Complete(31.5, 0.0, "f0", Outcome.CLIENT_TIMEOUT, None, "timed out"))
    _request(
        events,
        "f1",
        1.6,
        Phase.FAULT,
        Complete(2.5, 0.0, "f1", Outcome.OK, 200, "", "", 8, 5, 1.7, "stop"),
        ignore_eos=True,
        context="c0",  # its baseline said "r"
    )
    _request(
        events, "f2", 1.7, Phase.FAULT, Complete(2.1, 0.0, "f2", Outcome.TRUNCATED, 200, "cut", "", None, None, 1.8)
    )
    line = 'event=req rid=f3 state=failed error="Request 9 timed out after 6.0s in KVPoll.WaitingForInput"'
    events.append(Invoke(1.8, 0.0, "f3", "/v1/chat/completions", True, phase=Phase.FAULT))
    events.append(LogEvent(7.9, "decode", line, op="f3", fields=parse_engine_line(line)))
    events.append(Complete(8.0, 0.0, "f3", Outcome.CLEAN_ERROR, 500, "Decode transfer failed: " + line))
    events.append(FaultEvent(9.0, 0.0, "kill#1", Stage.HEALED, "SIGKILL decode"))
    events += [Sample(i / 2, HEALTH, {"decode": 1.0}) for i in range(70)]
    return sorted(events, key=lambda e: e.t)


def _history(keep: Callable[[Any], bool] = lambda _: True) -> History:
    h = History()
    for event in _events():
        if keep(event):
            h.append(event)
    return h


def _found(v_: v.Verdict) -> tuple[str, dict[str, Any]]:
    return v_.status.value, v_.as_json()["evidence"]


def test_every_scoped_check_of_the_judge_has_a_row():
    """A check that takes a phase, added without a row here, would escape this test."""
    scoped = {
        name
        for name, (_, module) in DECLARED.items()
        if module.startswith("chaos.judge")
        and "phase" in inspect.signature(getattr(importlib.import_module(module), name)).parameters
    }
    assert scoped == set(SCOPED)


@pytest.mark.parametrize("name", sorted(SCOPED))
def test_a_check_of_one_phase_judges_only_its_requests(name: str):
    make = SCOPED[name]
    baseline_ops = {f"b{i}" for i in range(2)}
    alone = _history(lambda e: getattr(e, "op", None) in (None, "", *baseline_ops) or isinstance(e, FaultEvent))
    assert _found(make(Phase.BASELINE)(_history())) == _found(make(Phase.BASELINE)(alone))
    assert _found(make(Phase.FAULT)(_history())) != _found(make(Phase.BASELINE)(_history())), "nothing at stake"
