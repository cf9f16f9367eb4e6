"""Histories written by hand for the judging tests: verdicts are pure functions of the history."""

from __future__ import annotations

from chaos import verdicts as v
from chaos.observe.growth import CHECKPOINT
from chaos.observe.history import History
from chaos.observe.records import Complete, FaultEvent, Invoke, Outcome, Phase, Sample, Stage, TriggerFired


def op(
    h: History,
    name: str,
    t0: float,
    t1: float | None,
    outcome: Outcome = Outcome.OK,
    *,
    reply: str = "r",
    context: str = "",
    phase: str = "",
    agent: str = "",
    rnd: int = -1,
    prompt: int | None = None,
    error: str = "",
) -> None:
    h.append(Invoke(t0, 0.0, name, "/v1/chat/completions", True, agent, rnd, context, Phase(phase)))
    if t1 is not None:
        h.append(Complete(t1, 0.0, name, outcome, 200 if outcome is Outcome.OK else 500, error, reply, prompt, 2))


def fault(h: History, inject: float, heal: float) -> None:
    h.append(FaultEvent(inject, 0.0, "kill#1", Stage.INJECT, "SIGKILL decode"))
    h.append(FaultEvent(heal, 0.0, "kill#1", Stage.HEALED, "SIGKILL decode"))


def series(h: History, source: str, metric: str, points: list[tuple[float, float]]) -> None:
    for t, value in points:
        h.append(Sample(t, source, {metric: value}))


def status(check, h: History) -> v.Status:
    return check(h).status


def soak_history(points: list[tuple[float, float]], metric: str = "open_fds:decode") -> History:
    """A soak's history: one checkpoint after each reading of the process trees."""
    h = History()
    for t, value in points:
        h.append(Sample(t, "procs", {metric: value}))
        h.append(TriggerFired(t + 0.1, CHECKPOINT, "quiet"))
    return h


# A failed request's line as each engine writes it when a backstop released it (pdsim's
# logfmt; SGLang 0.5.23's Finish line, its finish_reason carrying the abort's message), and
# a release by the primary path (a decode abort relayed to prefill)
PDSIM_WAITING = (
    "2026-12-04 14:42:15.986 INFO decode event=req ts=1796395335.986036 rid=e517 bootstrap_room=9069 state=failed "
    "status=500 error=\"Decode transfer failed for request rank=0 decode_req.req.rid='e517' "
    "decode_req.req.bootstrap_room=9069 with exception KVTransferError(bootstrap_room=9069): Request 9069 timed out "
    'after 6.0s in KVPoll.WaitingForInput"'
)
