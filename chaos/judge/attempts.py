"""What an engine did with each attempt of a request, by its own log: the attempt (an
engine request id, one per router try) ended served, or failed. A fault met a request when
an engine logged one of its attempts failing; a request whose every attempt at decode
failed cannot have been answered, so a success for it hides the failure from its client
(a transfer failed and answered 200 anyway: vllm#52234, sglang#30233).

pdsim logs ``state=finished`` or ``state=failed`` as a request leaves; SGLang's ``Finish:``
line reads ``finished``, or ``aborted`` when its reason is an abort (``chaos.observe.logs``).
Lines are taken in the order they were captured: SGLang stamps whole seconds.
"""

from __future__ import annotations

from typing import Collection, NamedTuple

from chaos.judge.backstops import released_by
from chaos.judge.declare import verdict
from chaos.judge.model import Finding, nothing_at_stake, passed
from chaos.judge.ops import completed, label, naming
from chaos.observe.history import History
from chaos.observe.records import LogEvent, Outcome

__all__ = [
    "FAILED",
    "OPEN",
    "SERVED",
    "End",
    "attempts",
    "endings",
    "failures_reach_the_client",
    "in_words",
    "met_a_failure",
]

SERVED = "finished"
FAILED = frozenset({"failed", "aborted"})
OPEN = "open"  # an attempt whose log has no end yet


def _ends(h: History, service: str, ops: Collection[str]) -> dict[str, dict[str, LogEvent | None]]:
    """Each op's attempts at ``service``: engine rid -> the line that ended it (its first
    failing line, since a failure, once logged, stands whatever the engine logged after;
    else its served line), or None while its log has no end for it."""
    out: dict[str, dict[str, LogEvent | None]] = {op: {} for op in ops}
    for ev in h.of(LogEvent):
        if ev.service != service or ev.op not in out or not (rid := ev.fields.get("rid")):
            continue
        before = out[ev.op].get(rid)
        if before is not None and before.fields.get("state") in FAILED:
            continue
        state = ev.fields.get("state", "")
        if state == SERVED or state in FAILED:
            out[ev.op][rid] = ev
        else:
            out[ev.op].setdefault(rid, None)
    return out


def attempts(h: History, service: str, ops: Collection[str]) -> dict[str, dict[str, str]]:
    """Each op's attempts at ``service``: engine rid -> how it ended (one of ``FAILED``,
    ``SERVED``, or "" while its log has no end for it)."""
    return {
        op: {rid: "" if ev is None else ev.fields["state"] for rid, ev in tries.items()}
        for op, tries in _ends(h, service, ops).items()
    }


class End(NamedTuple):
    """What ended one attempt: ``by`` is ``served``, ``open``, ``failed``, or the name of the
    backstop that released it (``chaos.observe.logs.BACKSTOPS``), with its seconds."""

    by: str
    after_s: float | None = None
    at: float | None = None  # when the engine logged it (history time), where it did

    @property
    def by_a_backstop(self) -> bool:
        """A backstop released the attempt: only a backstop's release carries its seconds."""
        return self.after_s is not None

    def __str__(self) -> str:
        """In words a report shows: ``waiting timeout after 6s``."""
        return self.by if self.after_s is None else f"{self.by} after {self.after_s:g}s"


def _end(ev: LogEvent | None) -> End:
    if ev is None:
        return End(OPEN)
    if ev.fields["state"] == SERVED:
        return End("served")
    found = released_by(ev)
    return End(*found, at=ev.t) if found else End("failed", at=ev.t)


def endings(h: History, ops: Collection[str], service: str = "decode") -> dict[str, list[End]]:
    """What ended each attempt of each op at ``service``: fields a known issue matches
    (``End.by``: no words to parse, so a rewording of the report cannot change a match), and
    the words a report shows (``str(end)``), from one pass over the logs."""
    return {op: [_end(ev) for ev in tries.values()] for op, tries in _ends(h, service, ops).items()}


def in_words(tries: list[str], service: str = "decode") -> str:
    """An op's endings, in words, as a phrase: "decode: 5 attempts, each waiting timeout after 6s"."""
    if not tries:
        return f"{service}: no attempt logged"
    kinds = sorted(set(tries))
    if len(tries) == 1:
        return f"{service}: 1 attempt, {kinds[0]}"
    return f"{service}: {len(tries)} attempts, " + (f"each {kinds[0]}" if len(kinds) == 1 else ", ".join(tries))


def met_a_failure(h: History, ops: Collection[str], service: str = "decode") -> list[str]:
    """The ops one of whose attempts ``service`` logged failing: the fault reached them,
    whatever the client got."""
    return sorted(op for op, tries in attempts(h, service, ops).items() if any(e in FAILED for e in tries.values()))


@verdict(lambda service="decode", **_: f"failures_reach_the_client({service})")
def failures_reach_the_client(h: History, *, service: str = "decode") -> Finding:
    """No request succeeded whose every attempt ``service`` logged failing: the engine that
    makes the reply failed it each time, so the client's success is a failure it was not
    told of. At stake: the successful requests with an attempt that failed there (a retry
    that was served is a true success)."""
    ok = [o for o in completed(h, None) if o.outcome is Outcome.OK]
    tries = attempts(h, service, [o.invoke.op for o in ok])
    struck = [o for o in ok if any(ended in FAILED for ended in tries[o.invoke.op].values())]
    if not struck:
        return nothing_at_stake(f"no successful request had an attempt {service} failed", requests=len(ok))
    hidden = [o for o in struck if all(ended in FAILED for ended in tries[o.invoke.op].values())]
    if hidden:
        return naming(
            hidden,
            len(struck),
            f"succeeded though {service} failed every attempt of theirs",
            lambda o: f"{label(o)}: {service} ended {', '.join(sorted(tries[o.invoke.op].values()))}",
            service=service,
        )
    return passed(
        f"{len(struck)} successful requests had a failed attempt on {service}, each served by a later one",
        stake=len(struck),
        of=len(struck),
    )
