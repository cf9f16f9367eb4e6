"""Known upstream issues as explore meets them: a failed invariant that a known behaviour of
smg or SGLang explains, given the faults the schedule fired and the evidence, is reported as
known, not as a find, so that a nightly run does not rediscover it. Each entry names the
test that carries the full evidence and fails once the behaviour changes: a suite test's
strict ``known_issue`` mark, or a real-SGLang test in ``tests/`` where the behaviour shows
only there (docs/known-issues.md). Unlike that mark, a match here is not strict: a random schedule may
or may not show the behaviour. Like it, a match needs the evidence the behaviour leaves
(``evidence``, judged by the marks' own ``evidence_fits``): another failure of the same
invariant is a find, whatever the schedule did."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Collection

from chaos.explore.schedule import Schedule
from chaos.judge.known import evidence_fits
from chaos.observe.logs import WAITING_TIMEOUT
from chaos.run.results import JudgedVerdict
from chaos.targets.base import Capability
from chaos.upstream import DEFERRED_KV_RELEASE, DEFERRED_KV_RELEASE_HELD

__all__ = ["KNOWN", "Known", "known_for"]


def _strikes(schedule: Schedule, actions: Collection[str], where: str) -> bool:
    return any(s.strike and s.strike.action in actions and s.strike.where == where for s in schedule.steps)


@dataclass(frozen=True)
class Known:
    verdict: str  # the invariant's kind
    component: str
    version: str
    behaviour: str
    shown_by: str  # the test that shows it, strict
    evidence: dict[str, Any]  # the shape of the evidence it leaves (``evidence_fits``)
    applies: Callable[[Schedule, JudgedVerdict, Collection[Capability]], bool]  # what the schedule did


KNOWN = (
    Known(
        "charged_only_where_struck",
        "smg",
        "1.13.0",
        "every PD attempt's failure is charged to both workers' circuit breakers, whichever leg failed "
        "(a 5xx, or decode unreachable): the engine no fault struck is charged with the one that was",
        "suites/test_circuit_breaker.py::test_decode_aborting_plain_requests_charges_only_decode",
        {"struck": ["prefill", "decode"]},
        # charged beside a struck engine: smg charged the struck one too, as it charges both
        lambda s, v, caps: any(v.evidence.values.get("charged", {}).get(e, 0) > 0 for e in v.evidence.values["struck"]),
    ),
    # the same requests fail ``outcomes_in`` instead where another step cut the client's hop
    # (a router killed): a frozen prefill's clients still wait for their deadline
    *(
        Known(
            kind,
            "smg",
            "1.13.0",
            "a PD request gets no response while its prefill leg hangs, though decode failed it "
            "(smg retries, and waits on prefill again): clients wait for their deadline",
            "suites/test_prefill_crash.py::test_prefill_frozen_then_thawed",
            {"outcomes": ["client_timeout"]},
            lambda s, v, caps: _strikes(s, ("freeze",), "prefill"),
        )
        for kind in ("failed_requests_are_clean", "outcomes_in")
    ),
    # a plain request behind a stuck KV link: decode's waiting timeout fails each attempt
    # with a 500 and smg retries it with a new room, until the client's own deadline
    *(
        Known(
            kind,
            "smg",
            "1.13.0",
            "smg retries a plain request that decode failed by its waiting timeout (a 500) with a new room, up "
            "to its retry budget, so behind a KV link that stalls the request ends after attempts x timeout, past "
            "a client deadline shorter than that (5 attempts x 6 s here): each attempt was failed by decode's "
            "waiting timeout, none by a fault of the router",
            "suites/test_retry_amplification.py::test_a_failing_request_reaches_prefill_at_most_the_retry_budget",
            {"outcomes": ["client_timeout"]},
            lambda s, v, caps: _strikes(s, ("blackhole", "bandwidth"), "kv") and _each_retried_by_timeout(v),
        )
        for kind in ("failed_requests_are_clean", "outcomes_in")
    ),
    Known(
        "backstops_stay_idle",
        "SGLang",
        "0.5.23",
        "prefill's abort of a room is never told to decode: decode holds it until its waiting timeout",
        "suites/test_engine_abort.py::test_prefill_aborting_everything_frees_decode_by_the_abort_path",
        {"backstops": ["waiting timeout"]},
        lambda s, v, caps: _strikes(s, ("abort_all",), "prefill"),
    ),
    Known(
        "no_leak",
        "SGLang",
        "0.5.23",
        "prefill pins a room whose transfer to a frozen decode never completes (no inflight watchdog upstream)",
        "suites/test_idle_watchdog.py::test_lone_transfer_to_a_frozen_decode",
        # what a room prefill pins holds: its inflight queue, its running count, its KV
        {"held": ["prefill:num_prefill_inflight_queue_reqs", "prefill:num_running_reqs", "prefill:num_used_tokens"]},
        lambda s, v, caps: Capability.INFLIGHT_WATCHDOG not in caps and _strikes(s, ("freeze",), "decode"),
    ),
    Known(
        "no_leak",
        "SGLang",
        "0.5.23",
        DEFERRED_KV_RELEASE,
        "tests/targets/test_sglang_cpu.py::test_a_failed_transfer_holds_decodes_kv_until_the_deferred_release_timeout",
        DEFERRED_KV_RELEASE_HELD,
        lambda s, v, caps: (
            Capability.FAILED_TRANSFER_FREED_AT_ONCE not in caps
            and (_strikes(s, ("down", "reset_peer"), "kv") or _strikes(s, ("kill",), "prefill"))
        ),
    ),
)


def _each_retried_by_timeout(verdict: JudgedVerdict) -> bool:
    """Whether every request the verdict names had more than one attempt at decode, each
    released by decode's waiting timeout (the ``ended_by`` field of
    ``chaos.judge.attempts``, not the report's words)."""
    ends = verdict.evidence.values.get("ended_by") or {}
    return bool(ends) and all(len(each) > 1 and set(each) == {WAITING_TIMEOUT} for each in ends.values())


def known_for(schedule: Schedule, verdict: JudgedVerdict, caps: Collection[Capability]) -> Known | None:
    """The known issue that explains ``verdict`` failing in ``schedule``'s episode, if any:
    the invariant's kind, the known evidence, and what the schedule did."""
    return next(
        (
            k
            for k in KNOWN
            if k.verdict == verdict.kind
            and evidence_fits(k.evidence, verdict.evidence.values)
            and k.applies(schedule, verdict, caps)
        ),
        None,
    )
