"""Whether a failed request's status tells the truth about whose failure it was.

A client decides from the status whether to fix its request, retry, or give up: a 4xx says
"your request is wrong, sending it again will not help"; a 5xx, 408 or 429 says "the service
failed, try again". A status that blames the wrong side sends a retrying client into a loop
(its own error told as the server's: sglang #31206, smg #2565 charged a client's 400 to a
worker's breaker) or makes it drop a request a retry would have served (the server's failure
told as the client's). And a request an engine's timeout released must be told as a timeout,
or nobody looking at the client's log can tell a slow hop from a broken one. Overload (429, or
503: no worker can take it now) must say when to retry (``Retry-After``), or every client
retries at once into the same overload; and a service's failure (a 5xx) must name the hop
that failed (an engine, the router, the bootstrap, the KV transfer, or a worker's address),
or the one reading the error cannot tell where to look.

What is known, not guessed: which requests are the client's own error the workload says when
it sends them (``Invoke.invalid``); which requests a timeout released, the engines' logs say
(``chaos.judge.attempts.endings``, parsed when captured).
"""

from __future__ import annotations

import re

from chaos.judge.attempts import endings
from chaos.judge.declare import verdict
from chaos.judge.model import Finding, nothing_at_stake, passed, unknown
from chaos.judge.ops import completed, label, naming, phase_tag
from chaos.observe.history import History
from chaos.observe.records import Done, Outcome, Phase

__all__ = ["client_errors_refused", "statuses_tell_the_truth"]

RETRY = frozenset({408, 429})  # 4xx statuses that say "try again": a timeout, too many requests
TIMEOUT_STATUSES = frozenset({408, 504})
TIMEOUT_WORDS = ("timed out", "timeout")
# how much later than the answer an engine's log line may be stamped (its flush) and still
# be what the answer tells
ANSWER_SLACK_S = 0.5
OVERLOAD = frozenset({429, 503})  # "not now": each must say when (Retry-After)
# what names a hop in an error: a service of the path, or the address of the one that failed
HOP = re.compile(r"\b(prefill|decode|router|bootstrap|kv|transfer|worker)s?\b|https?://[\w.\[\]:-]+", re.IGNORECASE)


def _blames_the_client(status: int | None, *, unfinished: bool = False) -> bool:
    """A 4xx that says "your request is wrong": not 408 or 429, which say "try again", but for
    a body its client never finished, where 408 is what went wrong (RFC 9110, 15.5.9)."""
    retry = RETRY - {408} if unfinished else RETRY
    return status is not None and 400 <= status < 500 and status not in retry


def _told_as_a_timeout(o: Done) -> bool:
    return o.complete.status in TIMEOUT_STATUSES or any(w in o.complete.error.lower() for w in TIMEOUT_WORDS)


def _lie(o: Done, released_by: set[str]) -> tuple[str, str] | None:
    """How ``o``'s answer misleads its client, as (kind, what it said), or None where it
    tells the truth."""
    status, error = o.complete.status, o.complete.error
    if o.invoke.invalid and not _blames_the_client(status, unfinished=o.invoke.unfinished):
        return "client_error_as_service", f"the client's own error ({o.invoke.invalid}) answered {status}, not a 4xx"
    if not o.invoke.invalid and _blames_the_client(status):
        return "service_error_as_client", f"a valid request answered {status}, the client's error"
    if released_by and not _told_as_a_timeout(o):
        return "timeout_untold", f"released by {', '.join(sorted(released_by))}, told as {status} {error[:80]!r}"
    if status in OVERLOAD and o.complete.retry_after is None:
        return "no_retry_after", f"answered {status} {error[:60]!r} with no Retry-After"
    if status is not None and status >= 500 and not HOP.search(error):
        return "hop_unnamed", f"answered {status} {error[:80]!r}, naming no hop"
    return None


@verdict(lambda phase=None, **_: "statuses_tell_the_truth" + phase_tag(phase))
def statuses_tell_the_truth(h: History, *, phase: Phase | None = None) -> Finding:
    """Every request that failed with an answer (``clean_error``) got a status that says whose
    failure it was: the client's own error a 4xx (not 408 or 429, which say "retry", save a
    408 for a body its client never finished); any other failure never such a 4xx; a request
    an engine's timeout released (its bootstrap or waiting timeout, prefill's inflight
    watchdog) a 408 or 504, or an error that says it timed out; overload (429, 503) a
    Retry-After; any other 5xx an error that names its hop. What no answer reached (a timeout
    at the client, a cut connection) says no status and is not judged here
    (``failed_requests_are_clean``)."""
    answered = [o for o in completed(h, phase) if o.outcome is Outcome.CLEAN_ERROR]
    if not answered:
        return nothing_at_stake("no request failed with an answer", of=0)
    ops = [o.invoke.op for o in answered]
    # the answer comes from a request's last attempt at each engine: an earlier one a timeout
    # released and a retry then failed otherwise (a circuit opened) is told by that retry
    # and only a release logged by the time the answer came can be what the answer tells: a
    # stream decode's death ended, whose room prefill's bootstrap timeout let go 3 s later,
    # was not ended by that timeout (explore, seed 1, episode 2, at 8ad3c21)
    answered_at = {o.invoke.op: o.complete.t for o in answered}
    released: dict[str, set[str]] = {op: set() for op in ops}
    for service in ("prefill", "decode"):
        for op, ends in endings(h, ops, service).items():
            last = ends[-1] if ends else None
            if last and last.by_a_backstop and (last.at is None or last.at <= answered_at[op] + ANSWER_SLACK_S):
                released[op].add(last.by)
    found = {o.invoke.op: lie for o in answered if (lie := _lie(o, released[o.invoke.op]))}
    statuses = sorted({str(o.complete.status) for o in answered})
    if found:
        return naming(
            [o for o in answered if o.invoke.op in found],
            len(answered),
            "failed requests got an answer that misleads their client",
            lambda o: f"{label(o)}: {found[o.invoke.op][1]}",
            statuses=statuses,
            lies={op: why for op, (_, why) in found.items()},
            kinds=sorted({kind for kind, _ in found.values()}),
        )
    invalid = sum(1 for o in answered if o.invoke.invalid)
    timed = sum(1 for op in ops if released[op])
    return passed(
        f"{len(answered)} failed request(s), each status telling whose failure it was "
        f"({invalid} the client's own, {timed} released by a timeout; statuses {', '.join(statuses)})",
        stake=len(answered),
        of=len(answered),
        statuses=statuses,
        invalid=invalid,
        timed_out=timed,
    )


@verdict(lambda within_s, **_: f"client_errors_refused(within={within_s:g}s)")
def client_errors_refused(h: History, *, within_s: float) -> Finding:
    """Every request that was the client's own error (``Invoke.invalid``: malformed, hostile,
    impossible) was refused with a 4xx that says what is wrong, within ``within_s`` of its
    send: not served, not failed as the service's error, not left unanswered until the
    client gave up, not cut without an answer. Hostile input is where a clear error matters
    most (a client must stop sending it) and where the stack must not spend its time."""
    invalid = [o for o in completed(h, None) if o.invoke.invalid]
    if not invalid:
        return unknown("no request was sent as the client's own error")

    def wrong(o: Done) -> str | None:
        took = o.latency
        status, error = o.complete.status, o.complete.error
        if o.outcome is Outcome.OK:
            return f"served with {status} after {took:.2f}s, not refused"
        if o.outcome is not Outcome.CLEAN_ERROR or status is None:
            return f"ended {o.outcome.value} after {took:.2f}s with no answer ({error[:80]})"
        if not 400 <= status < 500:
            return f"answered {status} after {took:.2f}s, not a 4xx ({error[:80]!r})"
        if not error.strip():
            return f"answered {status} saying nothing of what is wrong"
        if took > within_s:
            return f"refused with {status} only after {took:.2f}s"
        return None

    found = {o.invoke.op: why for o in invalid if (why := wrong(o))}
    statuses = sorted({str(o.complete.status) for o in invalid})
    worst = max(o.latency for o in invalid)
    if found:
        return naming(
            [o for o in invalid if o.invoke.op in found],
            len(invalid),
            "of the client's own errors were not refused clearly in time",
            lambda o: f"{label(o)} ({o.invoke.invalid}): {found[o.invoke.op]}",
            shown=6,
            statuses=statuses,
            worst_s=round(worst, 3),
            bound_s=within_s,
        )
    return passed(
        f"{len(invalid)} of the client's own errors refused with {', '.join(statuses)} within {worst:.2f}s",
        stake=len(invalid),
        of=len(invalid),
        statuses=statuses,
        worst_s=round(worst, 3),
        bound_s=within_s,
    )
