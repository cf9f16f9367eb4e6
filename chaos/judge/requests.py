"""How requests ended: each one did, in time, cleanly when it failed, and with a status
its body agrees with."""

from __future__ import annotations

from typing import Collection

from chaos.faults.kinds import ends_serving
from chaos.judge.attempts import End, endings, in_words
from chaos.judge.clock import Since, start
from chaos.judge.declare import verdict
from chaos.judge.logs import placed
from chaos.judge.model import Finding, failed, nothing_at_stake, passed, unknown
from chaos.judge.ops import completed, label, naming, none_completed, phase_tag, scope
from chaos.observe.history import History
from chaos.observe.phases import fault_spans
from chaos.observe.pipeline import SCHEDULER_PASS_S
from chaos.observe.records import Done, FaultEvent, Outcome, Phase, Stage

__all__ = [
    "every_request_terminal",
    "failed_requests_are_clean",
    "no_hidden_fault",
    "outcomes_in",
    "sigterm_drains",
    "status_agrees_with_body",
    "unservable_turned_away",
    "valid_requests_served",
]


@verdict(lambda within_s, **_: f"every_request_terminal(within={within_s:g}s)")
def every_request_terminal(h: History, *, within_s: float, phase: Phase | None = None) -> Finding:
    """Every request completed, each within ``within_s`` of its invoke."""
    ops = scope(h, phase)
    if not ops:
        return nothing_at_stake("no request" + ("" if phase is None else f" of phase {Phase(phase).value!r}"))
    open_ = [o for o in ops if o.complete is None]
    slow = [o for o in completed(h, phase) if o.latency > within_s]
    if open_ or slow:
        ev = [f"{label(o)} never completed" for o in open_[:5]]
        ev += [f"{label(o)} took {o.latency:.2f}s ({o.outcome.value})" for o in slow[:5]]
        return failed(
            f"{len(open_)} open, {len(slow)} over the bound: " + "; ".join(ev),
            ops=[o.invoke.op for o in [*open_, *slow]],
            open=len(open_),
            over=len(slow),
            bound_s=within_s,
        )
    worst = max(o.latency or 0 for o in ops)
    return passed(
        f"{len(ops)} requests, slowest {worst:.2f}s",
        stake=len(ops),
        requests=len(ops),
        slowest_s=worst,
        bound_s=within_s,
    )


def _clean_label(within_s: float | None, since: Since, phase: Phase | None = None, **_: object) -> str:
    return (
        "failed_requests_are_clean"
        + phase_tag(phase)
        + (f"(within={within_s:g}s of {Since(since).value})" if within_s else "")
    )


def _told(ends: dict[str, list[End]]) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    """Each op's attempts in words (the report's) and by what ended them (a known issue's
    match)."""
    return {op: [str(e) for e in es] for op, es in ends.items()}, {op: [e.by for e in es] for op, es in ends.items()}


@verdict(_clean_label)
def failed_requests_are_clean(
    h: History, *, within_s: float | None = None, since: Since = Since.FAULT, phase: Phase | None = None
) -> Finding:
    """Every request that did not succeed failed cleanly (error status or SSE error/abort),
    and, with ``within_s``, no later than that after ``since`` (or its own invoke, if later).
    A stream its client hung up on purpose (``hung_up``) did not fail: it is not judged here.
    At stake: the requests judged (each could have failed uncleanly); with ``within_s``, the
    failures (with none, the bound was never tried: not at stake).
    Nor is a recovery probe (``Phase.PROBE``, unless that phase is asked for): its deadline is
    the rig's own short patience, and its timing out says the stack was not back yet, which
    ``recovers`` judges against the target's bound (seen: a probe right after a control
    link's heal on real SGLang timed out at its 5 s, the next succeeded 6.8 s after the heal)."""
    since = Since(since)
    judged = [
        o
        for o in completed(h, phase)
        if o.outcome is not Outcome.HUNG_UP and (phase is not None or o.invoke.phase is not Phase.PROBE)
    ]
    ops = [o for o in judged if o.outcome is not Outcome.OK]
    unclean = [o for o in ops if o.outcome is not Outcome.CLEAN_ERROR]
    if unclean:
        tries, ends = _told(endings(h, [o.invoke.op for o in unclean[:8]]))
        return naming(
            unclean,
            len(ops),
            "failures were not clean",
            lambda o: (
                f"{label(o)} ended {o.outcome.value} ({in_words(tries.get(o.invoke.op, []))}): {o.complete.error[:120]}"
            ),
            outcomes=sorted({o.outcome.value for o in unclean}),
            first_byte=sorted({o.complete.first_byte_t is not None for o in unclean}),
            attempts=tries,
            ended_by=ends,
        )
    if not judged:
        return nothing_at_stake(none_completed(phase))
    if within_s is not None and not ops:
        return nothing_at_stake(
            f"none of {len(judged)} requests failed: the {within_s:g}s bound on failures was not tried",
            requests=len(judged),
        )
    if within_s is not None and ops:
        begun = start(h, since)
        if begun is None:
            return unknown(f"no {since.value} in the history to count {within_s:g}s from")
        late = [o for o in ops if o.complete.t - max(o.invoke.t, begun) > within_s]
        if late:
            ev = "; ".join(f"{label(o)} failed at t={o.complete.t:.2f}s" for o in late[:5])
            return failed(
                f"{len(late)} clean failures came later than {within_s:g}s after the {since.value}: {ev}",
                ops=[o.invoke.op for o in late],
                at=[begun, *(o.complete.t for o in late)],
                late=len(late),
                failures=len(ops),
                bound_s=within_s,
            )
    return passed(
        f"{len(ops)} of {len(judged)} requests failed, all clean" if ops else f"none of {len(judged)} requests failed",
        stake=len(ops) if within_s is not None else len(judged),
        failures=len(ops),
        requests=len(judged),
    )


# What any failure may end as, struck or not: a clean error, or the client's own hang-up
_ALWAYS = frozenset({Outcome.CLEAN_ERROR, Outcome.HUNG_UP})


def _unexplained(o: Done, spans: list[tuple[float, float]]) -> str:
    """Why no fault explains how ``o`` ended ("" if one does): it was not open while any
    fault was, or it was cut short (truncated) though no byte of it had come before the
    fault ended."""
    during = [(a, b) for a, b in spans if o.invoke.t <= b and o.complete.t >= a]
    if not during:
        return "open while no fault was"
    first = o.complete.first_byte_t
    if o.outcome is Outcome.TRUNCATED and (first is None or all(first > b for _, b in during)):
        return "cut short with no byte before the fault ended"
    return ""


def _outcomes_label(allowed: set[Outcome], explained: bool = False, **_: object) -> str:
    shown = ", ".join(sorted(Outcome(o).value for o in allowed))
    return f"outcomes_in(ok, {shown}{'; each while struck' if explained else ''})"


@verdict(_outcomes_label)
def outcomes_in(h: History, allowed: set[Outcome], *, phase: Phase | None = None, explained: bool = False) -> Finding:
    """Every request that did not succeed ended in one of ``allowed`` (e.g. a proxy fault
    may cut streams: truncated is then expected, a hang never is). With ``explained``, each
    that ended otherwise than cleanly had a fault to cause it: it was open while a fault
    was, and a stream cut short had begun before the fault ended (a request sent once every
    fault had healed that still timed out is no cut's doing). At stake: every request of the
    scope (each could have ended otherwise)."""
    done = completed(h, phase)
    if not done:
        return nothing_at_stake(none_completed(phase))
    ops = [o for o in done if o.outcome is not Outcome.OK]
    # healed, a fault is gone: its span ends there (a phase runs on to its last heal event)
    spans = fault_spans(h.faults(), ends=(Stage.HEALED,)) if explained else []
    bad = [
        o
        for o in ops
        if o.outcome not in allowed or (explained and o.outcome not in _ALWAYS and _unexplained(o, spans))
    ]
    if bad:
        tries, ends = _told(endings(h, [o.invoke.op for o in bad[:8]]))
        return naming(
            bad,
            len(ops),
            "failures outside the allowed outcomes",
            lambda o: (
                f"{label(o)} ended {o.outcome.value}"
                + (f", {why}" if o.outcome in allowed and (why := _unexplained(o, spans)) else "")
                + f" ({in_words(tries.get(o.invoke.op, []))})"
            ),
            outcomes=sorted({o.outcome.value for o in bad}),
            first_byte=sorted({o.complete.first_byte_t is not None for o in bad}),
            attempts=tries,
            ended_by=ends,
        )
    counts: dict[str, int] = {}
    for o in ops:
        counts[o.outcome.value] = counts.get(o.outcome.value, 0) + 1
    return passed(f"{len(done)} requests; failures: {counts or 'none'}", stake=len(done), failures=counts)


def _disagreement(o: Done) -> str:
    """How a request's status and body contradict each other ("" if they agree): a plain
    reply with a success status whose body is an error (not SGLang's graceful abort, which
    says ``finish_reason: abort``); a success with no content though it counted tokens."""
    c = o.complete
    graceful_abort = c.finish == "abort"
    if (
        not o.invoke.stream
        and o.outcome is Outcome.CLEAN_ERROR
        and c.status
        and 200 <= c.status < 300
        and not graceful_abort
    ):
        return f"status {c.status} with an error body: {c.error[:80]}"
    if o.outcome is Outcome.OK and not c.reply and (c.completion_tokens or 0) > 0:
        return f"success with no content, yet {c.completion_tokens} completion tokens"
    return ""


@verdict(lambda phase=None, **_: "status_agrees_with_body" + phase_tag(phase))
def status_agrees_with_body(h: History, *, phase: Phase | None = None) -> Finding:
    """No request's status and body disagree: an error body under a 200 is a failure a client
    that trusts the status takes for a reply, and a success missing its content is no
    success. (A stream's error event after its 200 is how a stream fails: not judged here.)"""
    ops = completed(h, phase)
    if not ops:
        return nothing_at_stake(none_completed(phase))
    bad = [o for o in ops if _disagreement(o)]
    if bad:
        return naming(bad, len(ops), "status and body disagree", lambda o: f"{label(o)}: {_disagreement(o)}")
    return passed(f"{len(ops)} requests' statuses agree with their bodies", stake=len(ops), of=len(ops))


# A process gone ends what it was streaming: a stream it served cannot go on. Bytes already on
# their way (in smg, in a proxy) may still arrive for a moment after. An abort the engine
# acknowledged reaches its scheduler, which ends the requests within a pass.
IN_FLIGHT_S = 0.5
ACTS_WITHIN_S = {"abort_all": SCHEDULER_PASS_S}


def _verified(h: History, actions: Collection[str], service: str | None = None) -> list[tuple[FaultEvent, float]]:
    """Each injected fault of ``actions`` (on ``service``, if given) that was verified to have
    taken effect, with the time it was: a fault never verified proves nothing."""
    verified = {f.fault: f.t for f in h.of(FaultEvent) if f.stage is Stage.VERIFIED}
    return [
        (f, verified[f.fault])
        for f in h.of(FaultEvent)
        if f.stage is Stage.INJECT
        and f.action in actions
        and (service is None or service in f.implicates)
        and f.fault in verified
    ]


def _streaming_at(o: Done, t: float) -> bool:
    """Whether ``o`` is a stream that had its first byte before ``t`` and ended after it."""
    first = o.complete.first_byte_t
    return o.invoke.stream and first is not None and first < t < o.complete.t


@verdict(lambda service="decode", **_: f"no_hidden_fault({service})")
def no_hidden_fault(h: History, *, service: str = "decode", in_flight_s: float = IN_FLIGHT_S) -> Finding:
    """A stream that ``service`` was serving when its process was killed or restarted, or
    when it aborted every request it held, does not go on to plain success: one that got
    its first byte before the fault began, still received bytes ``in_flight_s`` after the
    process was verified gone (or a scheduler pass after the engine acknowledged the
    abort), and ended ``ok`` was served by something the fault could not reach, which hid
    it from the client (a finding about the system, not about the rig). Unknown when no
    such fault struck."""
    ends = [(f.t, at + ACTS_WITHIN_S.get(f.action, 0.0)) for f, at in _verified(h, ends_serving(), service)]
    if not ends:
        return nothing_at_stake(f"no kill, restart or abort of everything on {service} was verified")
    ops = completed(h, None)
    where = placed(h, service)
    if any(where_op - {service} for where_op in where.values()):  # a twin served some: only its own were its
        ops = [o for o in ops if service in where.get(o.invoke.op, set())]
    struck = [(o, gone) for o in ops for begun, gone in ends if _streaming_at(o, begun)]
    hidden = [
        (o, gone) for o, gone in struck if o.outcome is Outcome.OK and any(c.t > gone + in_flight_s for c in o.chunks)
    ]
    if hidden:
        return naming(
            [o for o, _ in hidden],
            len(struck),
            f"streams open on {service} when it was killed or aborted them went on and succeeded",
            lambda o: f"{label(o)}: bytes until t={max(c.t for c in o.chunks):.2f}s, ended ok",
        )
    return passed(
        f"{len(struck)} streams open on {service} when struck; none went on to succeed"
        if struck
        else f"no stream had begun on {service} when it was struck",
        stake=len(struck),
        of=len(struck),
    )


@verdict(lambda **_: "sigterm_drains")
def sigterm_drains(h: History) -> Finding:
    """A SIGTERM drains: every stream that had begun before a service was sent SIGTERM ends
    ``ok``, whichever service it was. A draining service finishes what it holds and stops
    taking more (smg's three-phase shutdown, #876; SGLang answers /health 503 while it
    drains): only requests sent once it stopped may fail. A client's own hang-up is its own.
    Unknown when no SIGTERM was verified."""
    sent = [f.t for f, _ in _verified(h, ("terminate",))]
    if not sent:
        return nothing_at_stake("no SIGTERM was verified")
    open_ = [o for o in completed(h, None) if any(_streaming_at(o, t) for t in sent)]
    cut = [o for o in open_ if o.outcome not in (Outcome.OK, Outcome.HUNG_UP)]
    if cut:
        return naming(
            cut, len(open_), "streams open at a SIGTERM did not finish", lambda o: f"{label(o)} ended {o.outcome.value}"
        )
    return passed(
        f"{len(open_)} streams open at a SIGTERM, each finished"
        if open_
        else "no stream had begun when a SIGTERM came",
        stake=len(open_),
        of=len(open_),
    )


@verdict(lambda within_s, workload, **_: f"unservable_turned_away({workload}, within={within_s:g}s)")
def unservable_turned_away(h: History, *, within_s: float, workload: str) -> Finding:
    """Every request of ``workload``, each one the stack can never serve (a prompt over the
    model's context), was refused or failed within ``within_s`` of its send: turned away at
    the door, not left waiting for a timeout that belongs to something else, and never
    served (a reply to it was made of a prompt cut short)."""
    ops = [o for o in scope(h, None) if o.invoke.workload == workload]
    if not ops:
        return nothing_at_stake(f"no request of workload {workload!r} in the history")
    served = [o for o in ops if o.complete is not None and o.complete.outcome is Outcome.OK]
    late = [o for o in ops if o.complete is None or o.complete.t - o.invoke.t > within_s]
    if served or late:
        ev = [f"{label(o)} was served" for o in served[:3]]
        ev += [
            f"{label(o)} " + ("never ended" if o.complete is None else f"ended {o.latency:.2f}s after its send")
            for o in late[:3]
        ]
        return failed(
            f"{len(served)} served, {len(late)} not turned away within {within_s:g}s: " + "; ".join(ev),
            ops=[o.invoke.op for o in [*served, *late]],
            served=len(served),
            late=len(late),
            of=len(ops),
            bound_s=within_s,
        )
    worst = max(o.latency or 0.0 for o in ops)
    return passed(
        f"{len(ops)} unservable requests turned away, the slowest in {worst:.2f}s",
        stake=len(ops),
        of=len(ops),
        worst_s=worst,
        bound_s=within_s,
    )


@verdict(lambda phase=None, **_: "valid_requests_served" + phase_tag(phase))
def valid_requests_served(h: History, *, phase: Phase | None = None) -> Finding:
    """Every request of ``phase`` that was not the client's own error (``Invoke.invalid``)
    was served: other clients' requests in flight while some client sends hostile input are
    unaffected by it. At stake: those requests."""
    valid = [o for o in completed(h, phase) if not o.invoke.invalid]
    if not valid:
        return nothing_at_stake(none_completed(phase))
    bad = [o for o in valid if o.outcome is not Outcome.OK]
    if bad:
        return naming(
            bad,
            len(valid),
            "valid requests were not served",
            lambda o: f"{label(o)} ended {o.outcome.value} {o.complete.status or ''} {o.complete.error[:80]}",
            outcomes=sorted({o.outcome.value for o in bad}),
            statuses=sorted({o.complete.status for o in bad if o.complete.status}),
        )
    return passed(f"all {len(valid)} valid requests served", stake=len(valid), of=len(valid))
