"""Verdicts: pure functions of the history, each with a message that shows its evidence.

A verdict never reads live state. Each returns ``Verdict(name, status, message)`` with
status pass, fail or unknown; no data is unknown, never pass, and ``expect`` fails on
anything but pass. Bounds are arguments, in seconds, taken by scenarios from the target's
configuration (``chaos.bounds``), not written into verdicts.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Callable, Collection, Iterable, Iterator, Sequence

from chaos.errors import PremiseNotMet
from chaos.growth import Limit, fit
from chaos.history import Done, History, LogEvent, Op, Outcome, Phase, Sample, VerdictRecord
from chaos.pipeline import CIRCUIT_FAILURES, Metric
from chaos.reports.logs import parse_engine_line
from chaos.sampler import HEALTH

__all__ = [
    "Check",
    "KnownIssueSeen",
    "Since",
    "Status",
    "Verdict",
    "VerdictFailed",
    "Windowed",
    "amplification_at_most",
    "charged_only_where_struck",
    "context_grows",
    "conversations_finish",
    "counter_never_rises",
    "does_not_grow",
    "ended_as",
    "evaluate",
    "every_request_terminal",
    "expect",
    "failed_requests_are_clean",
    "gauge_reached",
    "health_tells_truth",
    "no_leak",
    "not_ready_before_gone",
    "open_at_fault",
    "outcomes_in",
    "prefix_reused",
    "queued_for",
    "raise_unless_passed",
    "record",
    "recovers",
    "refused_within",
    "replies_match_baseline",
    "requests_affected",
    "requests_retried",
    "require",
    "served_or_refused",
    "statuses_in",
    "stream_gaps_at_most",
    "stuck_before_router",
    "watchdog_fired",
]

SAMPLE_TOLERANCE_S = 0.25  # a gauge change is seen up to two 10 Hz samples late


class Since(enum.StrEnum):
    """The moment a bound's clock starts: the first fault's injection, the last fault's
    injection (the one that struck while earlier ones set the stage: decode killed while
    its KV link crawls), the first request sent after the first fault (a per-request
    watchdog's clock, such as SGLang's bootstrap or waiting timeout, starts when its request
    reaches the engine, never before the client sent it), the last heal, or the moment the
    system went quiet (healed and no request open)."""

    FAULT = "fault"
    LAST_FAULT = "last fault"
    REQUEST = "first request into the fault"
    HEAL = "heal"
    QUIET = "quiet"


def _start(h: History, since: Since) -> float | None:
    """When ``since`` happened in the history (None: it did not)."""
    if since is Since.FAULT:
        return h.first_fault_t()
    if since is Since.LAST_FAULT:
        return h.last_fault_t()
    if since is Since.REQUEST:
        fault = h.first_fault_t()
        return None if fault is None else min((o.invoke.t for o in h.ops() if o.invoke.t >= fault), default=None)
    heal = h.last_heal_t()
    if since is Since.HEAL or heal is None:
        return heal
    return max([heal, *(o.complete.t for o in h.ops() if o.complete is not None)])


class Status(enum.Enum):
    PASS = "pass"
    FAIL = "fail"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class Verdict:
    name: str
    status: Status
    message: str

    def __str__(self) -> str:
        return f"[{self.status.value.upper()}] {self.name}: {self.message}"


Check = Callable[[History], Verdict]


@dataclass(frozen=True)
class Windowed:
    """A check judged on the samples of a window that closes at a moment the history tells
    (``closes``; None: not yet known), from ``sources``. The scenario keeps sampling until
    those sources are sampled through it, or the check has passed (a pass is final: a later
    sample cannot undo a watchdog that fired on time, or a gauge that came back), so that
    no verdict it declared is judged on a window cut short (``Scenario.conclude``)."""

    check: Check
    closes: Callable[[History], float | None]
    sources: tuple[str, ...]

    @property
    def __name__(self) -> str:
        return self.check.__name__

    def __call__(self, history: History) -> Verdict:
        return self.check(history)


class VerdictFailed(AssertionError):
    """A test failed on its verdicts (not a rig error): ``failed`` when one of them failed,
    not only unknown (``--stop-at-verdict`` stops there, and only there)."""

    def __init__(self, message: str, *, failed: bool = True) -> None:
        super().__init__(message)
        self.failed = failed


def evaluate(history: History, checks: Iterable[Check]) -> list[Verdict]:
    out = []
    for check in checks:
        try:
            out.append(check(history))
        except Exception as exc:  # a verdict that raises knows nothing: unknown, never pass
            out.append(
                Verdict(getattr(check, "__name__", "verdict"), Status.UNKNOWN, f"raised {type(exc).__name__}: {exc}")
            )
    return out


def record(history: History, verdicts: list[Verdict]) -> list[Verdict]:
    """Write verdicts into the history (the report shows them from there)."""
    for verdict in verdicts:
        history.append(VerdictRecord(history.now(), verdict.name, verdict.status.value, verdict.message))
    return verdicts


class KnownIssueSeen(Exception):
    """Every verdict passed but those a known upstream issue fails, and each of those failed:
    the test shows the known behaviour again (the plugin reports it as xfailed, with the
    issue's words)."""


def raise_unless_passed(verdicts: list[Verdict], known: dict[str, str] | None = None) -> None:
    """``VerdictFailed`` naming every verdict that failed or is unknown. ``known`` maps a
    verdict's name (its start) to a known upstream issue that fails it: such a verdict
    failing is ``KnownIssueSeen`` when nothing else failed; passing, or not judged at all,
    it is a failure, strict as pytest's xfail: the issue is gone, or the scenario no longer
    shows it, and its record must change."""
    known = known or {}
    bad = [v for v in verdicts if v.status is not Status.PASS]
    seen = {name: [v for v in verdicts if v.name.startswith(name)] for name in known}
    gone = [
        f"[XPASS(strict)] {name}: known issue not shown ({'; '.join(v.message for v in got) or 'not judged'}): {known[name]}"
        for name, got in seen.items()
        if not any(v.status is Status.FAIL for v in got)
    ]
    confirmed = {v for got in seen.values() for v in got if v.status is Status.FAIL}
    others = [v for v in bad if v not in confirmed]
    if others or gone:
        failed = any(v.status is Status.FAIL for v in others)
        raise VerdictFailed(
            "\n".join([*(str(v) for v in others), *gone, *(f"{v} (known issue)" for v in confirmed)]), failed=failed
        )
    if confirmed:
        raise KnownIssueSeen(
            "; ".join(f"{known[name]} [{'; '.join(v.message for v in got)}]" for name, got in seen.items())
        )


def expect(history: History, *checks: Check) -> list[Verdict]:
    """Judge the history now; every verdict is recorded in it; raise unless all passed."""
    verdicts = record(history, evaluate(history, checks))
    raise_unless_passed(verdicts)
    return verdicts


def require(history: History, *premises: Check) -> None:
    """Check a scenario's premise before it is judged: a premise that did not hold raises
    ``PremiseNotMet`` (the run tested nothing; neither pass nor fail), recorded in the history."""
    for verdict in evaluate(history, premises):
        history.append(VerdictRecord(history.now(), f"premise {verdict.name}", verdict.status.value, verdict.message))
        if verdict.status is not Status.PASS:
            raise PremiseNotMet(f"premise not met: {verdict}")


def _named(name: str) -> Callable[[Check], Check]:
    def wrap(fn: Check) -> Check:
        fn.__name__ = name
        return fn

    return wrap


def _op_label(op: Op) -> str:
    i = op.invoke
    who = f" {i.agent} round {i.round}" if i.agent else ""
    return f"{i.op}{who} ({i.path}, t={i.t:.2f}s)"


def _scope(history: History, phase: Phase | None) -> list[Op]:
    return [op for op in history.ops() if phase is None or op.invoke.phase == phase]


def _completed(history: History, phase: Phase | None) -> list[Done]:
    """The requests of ``phase`` that completed (however they ended)."""
    return [Done(o.invoke, o.complete, o.chunks) for o in _scope(history, phase) if o.complete is not None]


def _none_completed(phase: Phase) -> str:
    return f"no request of phase {Phase(phase).value!r} completed"


def _all_within(
    vname: str, measured: Sequence[tuple[float, Op]], bound_s: float, *, over: str, each: str, passed: str
) -> Verdict:
    """Pass when every op's measure (seconds) is within ``bound_s``; else fail naming the
    first few over it. ``each`` formats one measure, ``passed`` the count and the worst."""
    beyond = [(d, o) for d, o in measured if d > bound_s]
    if beyond:
        ev = "; ".join(f"{_op_label(o)}: {each.format(d)}" for d, o in beyond[:4])
        return Verdict(vname, Status.FAIL, f"{len(beyond)} of {len(measured)} {over}: {ev}")
    return Verdict(vname, Status.PASS, passed.format(n=len(measured), worst=max(d for d, _ in measured)))


def every_request_terminal(*, within_s: float, phase: Phase | None = None) -> Check:
    """Every request completed, each within ``within_s`` of its invoke."""

    @_named(f"every_request_terminal(within={within_s:g}s)")
    def check(h: History) -> Verdict:
        name = check.__name__
        ops = _scope(h, phase)
        if not ops:
            return Verdict(name, Status.UNKNOWN, "no requests in the history")
        open_ = [o for o in ops if o.complete is None]
        slow = [o for o in _completed(h, phase) if o.latency > within_s]
        if open_ or slow:
            ev = [f"{_op_label(o)} never completed" for o in open_[:5]]
            ev += [f"{_op_label(o)} took {o.latency:.2f}s ({o.outcome.value})" for o in slow[:5]]
            return Verdict(name, Status.FAIL, f"{len(open_)} open, {len(slow)} over the bound: " + "; ".join(ev))
        worst = max(o.latency or 0 for o in ops)
        return Verdict(name, Status.PASS, f"{len(ops)} requests, slowest {worst:.2f}s")

    return check


def failed_requests_are_clean(
    *, within_s: float | None = None, since: Since = Since.FAULT, phase: Phase | None = None
) -> Check:
    """Every request that did not succeed failed cleanly (error status or SSE error/abort),
    and, with ``within_s``, no later than that after ``since`` (or its own invoke, if later)."""
    since = Since(since)

    @_named("failed_requests_are_clean" + (f"(within={within_s:g}s of {since.value})" if within_s else ""))
    def check(h: History) -> Verdict:
        name = check.__name__
        ops = [o for o in _completed(h, phase) if o.outcome is not Outcome.OK]
        unclean = [o for o in ops if o.outcome is not Outcome.CLEAN_ERROR]
        if unclean:
            ev = "; ".join(f"{_op_label(o)} ended {o.outcome.value}: {o.complete.error[:120]}" for o in unclean[:5])
            return Verdict(name, Status.FAIL, f"{len(unclean)} of {len(ops)} failures were not clean: {ev}")
        if within_s is not None and ops:
            start = _start(h, since)
            if start is None:
                return Verdict(name, Status.UNKNOWN, f"no {since.value} in the history to count {within_s:g}s from")
            late = [o for o in ops if o.complete.t - max(o.invoke.t, start) > within_s]
            if late:
                ev = "; ".join(f"{_op_label(o)} failed at t={o.complete.t:.2f}s" for o in late[:5])
                return Verdict(
                    name,
                    Status.FAIL,
                    f"{len(late)} clean failures came later than {within_s:g}s after the {since.value}: {ev}",
                )
        return Verdict(name, Status.PASS, f"{len(ops)} failed requests, all clean" if ops else "no request failed")

    return check


def _increments(series: list[tuple[float, float]]) -> list[float]:
    return [t for (_, a), (t, b) in zip(series, series[1:]) if b > a]


def watchdog_fired(
    name: str, counter: Metric, *, timeout_s: float, slack_s: float, since: Since = Since.FAULT
) -> Check:
    """The failure counter a watchdog bumps rose within [T, T + slack] after the first fault
    (``Since.FAULT``), after the first request sent into it (``Since.REQUEST``: for a
    watchdog whose clock each request starts), or after the last heal (``Since.HEAL``: the watchdog's clock starts
    when a healed service resumes work), T being ``timeout_s``: it fired, neither early nor
    late. A heal takes effect at some moment while it runs, so the window opens T after the
    heal began and closes T + slack after it was done; times are given from its start."""
    since, (source, counter_name) = Since(since), counter
    after = f"the {since.value}"

    @_named(
        f"watchdog_fired({name}: {source}:{counter_name} in [{timeout_s:g}s, {timeout_s + slack_s:g}s] after {after})"
    )
    def check(h: History) -> Verdict:
        vname = check.__name__
        done = _start(h, since)
        series = h.counter_series(source, counter_name)
        if done is None or not series:
            return Verdict(vname, Status.UNKNOWN, f"no {since.value} or no samples of the counter")
        began = h.last_heal_began_t() if since is Since.HEAL else None
        ref = done if began is None else began
        lo, hi = ref + timeout_s - SAMPLE_TOLERANCE_S, done + timeout_s + slack_s
        took = f" (it took {done - ref:.2f}s)" if done - ref >= 0.01 else ""
        ups = [t for t in _increments(series) if t >= ref]
        hits = [t for t in ups if lo <= t <= hi]
        seen = ", ".join(f"{t - ref:+.2f}s" for t in ups[:6]) or "never"
        early = [t for t in ups if t < lo]
        if early:  # whatever came after: a watchdog that fires before its timeout is broken
            return Verdict(
                vname,
                Status.FAIL,
                f"{counter_name} on {source} rose {early[0] - ref:.2f}s after {after}{took}, before the window opens: fired early; rises seen: {seen}",
            )
        if hits:
            return Verdict(vname, Status.PASS, f"{counter_name} rose {hits[0] - ref:.2f}s after {after}{took}")
        if series[-1][0] < hi:
            return Verdict(
                vname,
                Status.UNKNOWN,
                f"samples end {series[-1][0] - ref:.2f}s after {after}{took}, before the window closes; rises seen: {seen}",
            )
        return Verdict(
            vname,
            Status.FAIL,
            f"{counter_name} on {source} did not rise inside the window; rises after {after}{took}: {seen}",
        )

    def closes(h: History) -> float | None:
        start = _start(h, since)
        return None if start is None else start + timeout_s + slack_s

    return Windowed(check, closes, (source,))


def no_leak(*, gauges: Iterable[Metric | tuple[str, str]], within_s: float, since: Since = Since.HEAL) -> Check:
    """Each gauge returns to its pre-fault baseline (its lowest value before the first
    fault) within ``within_s`` of the last heal (``Since.HEAL``), of the moment the system
    went quiet (``Since.QUIET``), for scenarios whose load goes on after the heal, or of the
    first fault (``Since.FAULT``), for what must be let go while the fault still lasts."""
    since, gauges = Since(since), [Metric(*g) for g in gauges]

    @_named(f"no_leak(within={within_s:g}s of {since.value})")
    def check(h: History) -> Verdict:
        vname = check.__name__
        inject, heal = h.first_fault_t(), h.last_heal_t()
        if inject is None or heal is None:
            return Verdict(vname, Status.UNKNOWN, "no healed fault in the history")
        heal = _start(h, since)
        if heal is None:
            return Verdict(vname, Status.UNKNOWN, f"no {since.value} in the history")
        problems, unknown, notes = [], [], []
        for source, metric in gauges:
            series = h.series(source, metric)
            before = [v for t, v in series if t < inject]
            if not before:  # no baseline: the gauge's level before the fault is unknown, not 0
                unknown.append(f"{source}:{metric} has no sample before the fault")
                continue
            baseline = min(before)  # the quietest moment before the fault
            window = [(t, v) for t, v in series if heal <= t <= heal + within_s]
            if not window:
                unknown.append(f"{source}:{metric} has no samples in the window")
                continue
            back = next((t for t, v in window if v <= baseline), None)
            if back is None:
                problems.append(
                    f"{source}:{metric} stayed above its baseline {baseline:g} (max {max(v for _, v in window):g}, last {window[-1][1]:g} at +{window[-1][0] - heal:.2f}s)"
                )
            else:
                notes.append(f"{source}:{metric} back to {baseline:g} at +{back - heal:.2f}s")
        if problems:
            return Verdict(vname, Status.FAIL, "; ".join(problems))
        if unknown:
            return Verdict(vname, Status.UNKNOWN, "; ".join(unknown))
        return Verdict(vname, Status.PASS, "; ".join(notes))

    def closes(h: History) -> float | None:
        start = _start(h, since) if h.first_fault_t() is not None else None
        return None if start is None else start + within_s

    return Windowed(check, closes, tuple(dict.fromkeys(source for source, _ in gauges)))


def recovers(*, within_s: float, ready: Collection[str] = ()) -> Check:
    """A request invoked after the last heal succeeds, completing within ``within_s`` of it;
    with ``ready`` (services whose /health is watched: ``scenario.watch_health``), within
    ``within_s`` of the first probe after the heal at which the last of them answered 200.
    That is for an engine the scenario held (frozen) for as long as another one took to
    restart: back, it first works off what queued for it meanwhile (SGLang's /health
    generates a token behind all of it: 8.7 s after an 81 s freeze on a slow 2-core machine),
    work that grows with the hold. How long it took is shown, not judged; the router's part
    (its health checks, its breakers) is what ``within_s`` bounds. A service watched that
    never answered 200 after the heal leaves the clock at the heal."""
    label = f" of {', '.join(ready)} ready" if ready else ""

    @_named(f"recovers(within={within_s:g}s{label})")
    def check(h: History) -> Verdict:
        vname = check.__name__
        heal = h.last_heal_t()
        if heal is None:
            return Verdict(vname, Status.UNKNOWN, "no heal in the history")
        said = {s: h.series(HEALTH, s) for s in ready}
        unwatched = [s for s, answers in said.items() if not answers]
        if unwatched:
            return Verdict(
                vname,
                Status.UNKNOWN,
                f"no answer from {', '.join(unwatched)}'s /health was sampled (scenario.watch_health)",
            )
        up = {s: next((t for t, val in answers if t >= heal and val == 1.0), None) for s, answers in said.items()}
        never = [s for s, t in up.items() if t is None]
        start, since = heal, "the heal"
        if never:
            since = f"the heal ({', '.join(never)} never answered 200 after it)"
        elif up:
            start = max(t for t in up.values() if t is not None)
            since = f"{', '.join(ready)} answered 200 again ({start - heal:.2f}s after the heal)"
        after = [o for o in _completed(h, None) if o.invoke.t >= heal]
        ok = [o for o in after if o.outcome is Outcome.OK]
        if not after:
            return Verdict(vname, Status.UNKNOWN, "no request was sent after the heal")
        if ok and ok[0].complete.t - start <= within_s:
            return Verdict(vname, Status.PASS, f"first success {ok[0].complete.t - start:.2f}s after {since}")
        outcomes = ", ".join(f"{o.outcome.value}@+{o.complete.t - start:.1f}s" for o in after[:6])
        return Verdict(vname, Status.FAIL, f"no success within {within_s:g}s of {since}; after it: {outcomes}")

    return check


def _divergence(got: str, want: str) -> str:
    """Where a reply leaves its baseline: the first differing character, with a little of
    each side from there (a reply can be right for pages and wrong after)."""
    at = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
    return f"differs from char {at} of {len(want)}: got {got[at : at + 40]!r}, baseline {want[at : at + 40]!r}"


def replies_match_baseline(*, baseline_phase: Phase = Phase.BASELINE) -> Check:
    """Every successful reply equals the fault-free baseline's reply to the same context."""

    @_named("replies_match_baseline")
    def check(h: History) -> Verdict:
        vname = check.__name__
        ops = [o for o in _completed(h, None) if o.outcome is Outcome.OK and o.invoke.context]
        base = {o.invoke.context: o.complete.reply for o in ops if o.invoke.phase == baseline_phase}
        pairs = [
            (o, base[o.invoke.context]) for o in ops if o.invoke.phase != baseline_phase and o.invoke.context in base
        ]
        if not pairs:
            return Verdict(vname, Status.UNKNOWN, "no reply shares a context with the baseline")
        wrong = [(o, b) for o, b in pairs if o.complete.reply != b]
        if wrong:
            ev = "; ".join(f"{_op_label(o)} {_divergence(o.complete.reply, b)}" for o, b in wrong[:3])
            return Verdict(vname, Status.FAIL, f"{len(wrong)} of {len(pairs)} replies differ from the baseline: {ev}")
        return Verdict(vname, Status.PASS, f"{len(pairs)} replies equal the baseline")

    return check


def context_grows() -> Check:
    """Per agent, each successful round's prompt is longer than the previous one's: no turn
    was silently dropped."""

    @_named("context_grows")
    def check(h: History) -> Verdict:
        vname = check.__name__
        by_agent: dict[tuple[str, str], list[Done]] = {}
        for o in _completed(h, None):
            if o.invoke.agent and o.outcome is Outcome.OK:
                by_agent.setdefault((o.invoke.phase, o.invoke.agent), []).append(o)
        if not by_agent:
            return Verdict(vname, Status.UNKNOWN, "no conversation in the history")
        bad = []
        for (phase, agent), ops in by_agent.items():
            ops.sort(key=lambda o: o.invoke.round)
            tokens = [o.complete.prompt_tokens for o in ops]
            if any(t is None for t in tokens):
                return Verdict(vname, Status.UNKNOWN, f"{agent} replies carry no prompt_tokens")
            for prev, cur, op in zip(tokens, tokens[1:], ops[1:]):
                if cur <= prev:  # type: ignore[operator]
                    bad.append(f"{agent} ({phase}) round {op.invoke.round}: prompt_tokens {cur} after {prev}")
        if bad:
            return Verdict(vname, Status.FAIL, "; ".join(bad[:5]))
        return Verdict(vname, Status.PASS, f"{len(by_agent)} conversations, prompts strictly growing")

    return check


def gauge_reached(gauge: Metric, value: float, *, why: str) -> Check:
    """Premise: ``gauge`` reached ``value`` in some sample (the load filled what it meant to
    fill, e.g. the router's admission permits); otherwise unknown."""
    source, metric = gauge

    @_named(f"gauge_reached({source}:{metric} >= {value:g})")
    def check(h: History) -> Verdict:
        vname = check.__name__
        series = h.series(source, metric)
        if not series:
            return Verdict(vname, Status.UNKNOWN, f"no samples of {source}:{metric}")
        peak = max(val for _, val in series)
        if peak < value:
            return Verdict(vname, Status.UNKNOWN, f"{metric} peaked at {peak:g} ({why})")
        return Verdict(vname, Status.PASS, f"{metric} peaked at {peak:g}")

    return check


def counter_never_rises(counter: Metric, *, why: str = "") -> Check:
    """A failure counter stays flat for the whole test: slow was not taken for stuck."""
    source, counter_name = counter

    @_named(f"counter_never_rises({source}:{counter_name}{': ' + why if why else ''})")
    def check(h: History) -> Verdict:
        vname = check.__name__
        series = h.counter_series(source, counter_name)
        if len(series) < 2:
            return Verdict(vname, Status.UNKNOWN, f"too few samples of {source}:{counter_name}")
        ups = _increments(series)
        if ups:
            ref = h.first_fault_t() or 0.0
            return Verdict(
                vname,
                Status.FAIL,
                f"{counter_name} rose {len(ups)} time(s), first {ups[0] - ref:+.2f}s after the fault",
            )
        return Verdict(vname, Status.PASS, f"{counter_name} stayed at {series[-1][1]:g}")

    return check


def _charges(h: History, worker: str) -> list[tuple[float, float]]:
    """The failures smg charged to one worker's breaker, sample by sample, read where smg
    lists the worker's breaker outcomes at all. smg creates a worker's ``failure`` series
    at its first failure, so a sample listing the worker's outcomes without it reads 0."""
    listed, failures = CIRCUIT_FAILURES.at(worker), CIRCUIT_FAILURES.at(worker, "failure")
    return [
        (s.t, s.values.get(failures.name, 0.0))
        for s in h.of(Sample)
        if s.source == listed.source and listed.name in s.values
    ]


def charged_only_where_struck(workers: dict[str, str]) -> Check:
    """smg charges a failure to the breaker of an engine a fault struck (killed, frozen,
    aborted, one end of a broken link), never to one no fault touched: a healthy worker
    charged for another's failure, or for a client's error, has its circuit opened for
    nothing (smg #2565, sglang #31206). ``workers``: engine -> smg's URL for it. A counter
    that falls (smg restarted) counts what it shows after the fall."""

    @_named("charged_only_where_struck")
    def check(h: History) -> Verdict:
        vname = check.__name__
        struck = {e for f in h.faults() for e in f.implicates}
        shown: list[str] = []
        for engine, worker in workers.items():
            series = _charges(h, worker)
            if len(series) < 2:
                return Verdict(
                    vname, Status.UNKNOWN, f"smg listed no breaker outcomes of {engine} ({worker}) in two samples"
                )
            charged = [(t, b - a if b >= a else b) for (_, a), (t, b) in zip(series, series[1:]) if b != a]
            total = sum(n for _, n in charged)
            if total and engine not in struck:
                ref = h.first_fault_t() or 0.0
                return Verdict(
                    vname,
                    Status.FAIL,
                    f"smg charged {total:g} failure(s) to {engine}'s breaker, which no fault struck, first {charged[0][0] - ref:+.2f}s after the fault (struck: {', '.join(sorted(struck)) or 'no engine'})",
                )
            shown.append(f"{engine} {total:g}{' (struck)' if engine in struck else ''}")
        return Verdict(vname, Status.PASS, "failures charged: " + ", ".join(shown))

    return check


def _engine_lines(history: History, service: str, ops: Collection[str]) -> Iterator[tuple[str, dict[str, str]]]:
    """The fields of each of ``service``'s log lines about one of ``ops``, with its op: the
    lines ``chaos.reports.logs`` joined to the history, read as ``parse_engine_line`` reads
    pdsim's and SGLang's alike."""
    for ev in history.of(LogEvent):
        head, _, line = ev.line.partition(" ")
        op = head.removeprefix("op=")
        if ev.service == service and op in ops:
            yield op, parse_engine_line(line)


def receptions(history: History, service: str, ops: Iterable[str]) -> dict[str, int]:
    """How many times ``service`` received each op: the engine request ids its log lines
    name, joined to the op the client sent (``chaos.reports.logs``)."""
    rids: dict[str, set[str]] = {op: set() for op in ops}
    for op, fields in _engine_lines(history, service, rids):
        if rid := fields.get("rid"):
            rids[op].add(rid)
    return {op: len(found) for op, found in rids.items()}


def prefix_reused(service: str, *, phase: Phase, why: str) -> Check:
    """Premise: ``service`` served at least one request of ``phase`` from a cached prefix:
    its finish line for the request reports ``cached_tokens`` above 0 (SGLang's ``Finish:``
    meta_info, pdsim's finished line). On decode that count includes prefill's own cache
    hits (SGLang 0.5.23 seeds it with them), so a scenario proving decode's reuse flushes
    prefill's cache first."""

    @_named(f"prefix_reused({service}, {Phase(phase).value})")
    def check(h: History) -> Verdict:
        vname = check.__name__
        ops = {o.invoke.op for o in _completed(h, phase)}
        reused: dict[str, int] = {}
        for op, fields in _engine_lines(h, service, ops):
            if (n := int(fields.get("cached_tokens") or 0)) > 0:
                reused[op] = max(reused.get(op, 0), n)
        if not reused:
            return Verdict(
                vname,
                Status.UNKNOWN,
                f"no log line of {service} shows a cached prefix for the {len(ops)} requests ({why})",
            )
        return Verdict(
            vname,
            Status.PASS,
            f"{len(reused)} of {len(ops)} requests served from a cached prefix, up to {max(reused.values())} tokens",
        )

    return check


def conversations_finish(rounds: int, *, phase: Phase) -> Check:
    """Every agent of ``phase`` got a successful reply in each of its ``rounds`` rounds
    (after its retries): no conversation was given up."""

    @_named(f"conversations_finish({rounds} rounds, {Phase(phase).value})")
    def check(h: History) -> Verdict:
        vname = check.__name__
        done: dict[str, set[int]] = {}
        for o in _scope(h, phase):
            if o.invoke.agent:
                done.setdefault(o.invoke.agent, set()).update({o.invoke.round} if o.outcome is Outcome.OK else set())
        if not done:
            return Verdict(vname, Status.UNKNOWN, f"no conversation in phase {Phase(phase).value!r}")
        short = {agent: sorted(set(range(rounds)) - got) for agent, got in done.items() if len(got) < rounds}
        if short:
            return Verdict(
                vname,
                Status.FAIL,
                "; ".join(f"{agent} has no reply for round(s) {missing}" for agent, missing in sorted(short.items())),
            )
        return Verdict(vname, Status.PASS, f"{len(done)} agent(s), every one of {rounds} rounds answered")

    return check


def amplification_at_most(budget: int, *, phase: Phase, service: str = "prefill") -> Check:
    """Each client request of ``phase`` reached ``service`` at most ``budget`` times (one
    try and the router's retries): one request, however it failed, must not become more
    executions than the retry budget allows (sglang PR #34570: a PD dispatch is not
    idempotent). The amplification factor, mean and worst, is in the message; the count is
    of the service's log lines joined to each request, so when none names any, unknown."""

    @_named(f"amplification_at_most({budget}, {service}, {Phase(phase).value})")
    def check(h: History) -> Verdict:
        vname = check.__name__
        ops = _completed(h, phase)
        if not ops:
            return Verdict(vname, Status.UNKNOWN, _none_completed(phase))
        seen = receptions(h, service, (o.invoke.op for o in ops))
        counted = [n for n in seen.values() if n]
        if not counted:
            return Verdict(vname, Status.UNKNOWN, f"no {service} log line names any of the {len(ops)} requests")
        factor = f"amplification {sum(counted) / len(counted):.2f} mean, {max(counted)} worst over {len(counted)} requests (budget {budget})"
        over = sorted(((n, op) for op, n in seen.items() if n > budget), reverse=True)
        if over:
            return Verdict(
                vname, Status.FAIL, f"{factor}; over budget: " + ", ".join(f"{op} x{n}" for n, op in over[:5])
            )
        missing = len(ops) - len(counted)
        return Verdict(vname, Status.PASS, factor + (f"; {missing} never seen in {service}'s log" if missing else ""))

    return check


def requests_retried(*, phase: Phase, why: str, service: str = "prefill") -> Check:
    """Premise: ``service`` received at least one request of ``phase`` more than once (the
    router retried it): otherwise the run tested no retry."""

    @_named(f"requests_retried({service}, {Phase(phase).value})")
    def check(h: History) -> Verdict:
        vname = check.__name__
        seen = receptions(h, service, (o.invoke.op for o in _completed(h, phase)))
        again = [n for n in seen.values() if n > 1]
        if not again:
            return Verdict(vname, Status.UNKNOWN, f"no request of {len(seen)} reached {service} twice ({why})")
        return Verdict(vname, Status.PASS, f"{len(again)} of {len(seen)} reached {service} more than once")

    return check


def does_not_grow(limits: Iterable[Limit]) -> Check:
    """Soak: each quantity, read at the quiet checkpoints after warm-up, keeps its floor:
    the lowest value of the last third exceeds the lowest of the first by no more than its
    limit (KV tokens in use, in-flight counts, a process tree's open files and memory). A
    quantity with too few checkpoint values is unknown; every fitted slope is shown, per hour."""
    limits = list(limits)

    @_named("does_not_grow(" + ", ".join(lim.label for lim in limits) + ")")
    def check(h: History) -> Verdict:
        vname = check.__name__
        grown, missing, shown = [], [], []
        for lim in limits:
            f = fit(h, lim.metric)
            if f is None:
                missing.append(lim.label)
                continue
            allowed = lim.allowed(f)
            line = f"{lim.label} {lim.show(f.slope_per_s * 3600)}/h (floor {lim.show(f.growth)} over {f.window_s:.0f}s, at most {lim.show(allowed, sign=False)})"
            shown.append(line)
            if f.growth > allowed:
                grown.append(line)
        if grown:
            return Verdict(vname, Status.FAIL, f"grew past its limit: {'; '.join(grown)}")
        if missing:
            return Verdict(
                vname, Status.UNKNOWN, f"fewer than 3 checkpoint values of {', '.join(missing)}; {'; '.join(shown)}"
            )
        return Verdict(vname, Status.PASS, "; ".join(shown))

    return check


def requests_affected(*, phase: Phase, why: str) -> Check:
    """Premise: the fault reached at least one request of ``phase`` (one did not succeed).
    When every request succeeded, the fault landed after they were done: unknown."""

    @_named(f"requests_affected({Phase(phase).value})")
    def check(h: History) -> Verdict:
        vname = check.__name__
        ops = _completed(h, phase)
        if not ops:
            return Verdict(vname, Status.UNKNOWN, _none_completed(phase))
        hit = [o for o in ops if o.outcome is not Outcome.OK]
        if not hit:
            return Verdict(
                vname,
                Status.UNKNOWN,
                f"all {len(ops)} requests succeeded: the fault came too late for its premise ({why})",
            )
        return Verdict(vname, Status.PASS, f"{len(hit)} of {len(ops)} requests met the fault")

    return check


def ended_as(outcome: Outcome, *, phase: Phase, why: str) -> Check:
    """Premise: every request of ``phase`` ended as ``outcome`` (e.g. each abandoned request
    was still in flight when its client gave up, not refused up front). Otherwise the
    scenario did not do what it meant to: unknown."""

    @_named(f"ended_as({outcome.value}, {Phase(phase).value})")
    def check(h: History) -> Verdict:
        vname = check.__name__
        ops = _completed(h, phase)
        if not ops:
            return Verdict(vname, Status.UNKNOWN, _none_completed(phase))
        other = [o for o in ops if o.outcome is not outcome]
        if other:
            ev = "; ".join(f"{_op_label(o)} ended {o.outcome.value} {o.complete.error[:80]}" for o in other[:3])
            return Verdict(vname, Status.UNKNOWN, f"{len(other)} of {len(ops)} did not ({why}): {ev}")
        return Verdict(vname, Status.PASS, f"all {len(ops)} ended {outcome.value}")

    return check


def open_at_fault(*, phase: Phase, why: str) -> Check:
    """Premise: every request of ``phase`` was sent before the fault began and ended after
    it: the fault met them open (a SIGTERM that came once they were done tested nothing)."""

    @_named(f"open_at_fault({Phase(phase).value})")
    def check(h: History) -> Verdict:
        vname = check.__name__
        start = h.first_fault_t()
        ops = _completed(h, phase)
        if start is None or not ops:
            return Verdict(
                vname, Status.UNKNOWN, "no fault in the history" if start is None else _none_completed(phase)
            )
        closed = [o for o in ops if not o.invoke.t < start < o.complete.t]
        if closed:
            ev = "; ".join(f"{_op_label(o)} ended at t={o.complete.t:.2f}s" for o in closed[:3])
            return Verdict(
                vname,
                Status.UNKNOWN,
                f"{len(closed)} of {len(ops)} were not open at the fault (t={start:.2f}s; {why}): {ev}",
            )
        return Verdict(vname, Status.PASS, f"all {len(ops)} open at the fault")

    return check


def stream_gaps_at_most(gap_s: float, *, phase: Phase, why: str) -> Check:
    """In every stream of ``phase``, no two consecutive chunks are more than ``gap_s``
    apart: its tokens kept flowing (whatever stalled elsewhere did not stall it). The wait
    for the first chunk is not a gap: prefill and the transfer come before it."""

    @_named(f"stream_gaps_at_most({gap_s:g}s, {Phase(phase).value}: {why})")
    def check(h: History) -> Verdict:
        vname = check.__name__
        streams = [o for o in _scope(h, phase) if o.invoke.stream and len(o.chunks) >= 2]
        if not streams:
            return Verdict(vname, Status.UNKNOWN, f"no stream of phase {Phase(phase).value!r} with two chunks or more")
        worst = [(max(b.t - a.t for a, b in zip(o.chunks, o.chunks[1:])), o) for o in streams]
        return _all_within(
            vname,
            worst,
            gap_s,
            over="streams stalled",
            each="{:.2f}s without a chunk",
            passed="{n} streams, longest gap {worst:.2f}s",
        )

    return check


def health_tells_truth(service: str, *, phase: Phase) -> Check:
    """A 200 from ``service``'s ``/health`` means it serves: no request of ``phase`` failed
    while the latest probe before its end said healthy (a decode healthy to every checker
    while it can serve nothing: #32652, #31144). Needs ``scenario.watch_health(service)``.
    What /health said during the fault is shown, not judged: an engine whose link to its
    peer is down is itself alive, and SGLang's /health does not look at the link."""

    @_named(f"health_tells_truth({service}, {Phase(phase).value})")
    def check(h: History) -> Verdict:
        vname = check.__name__
        said = h.series(HEALTH, service)
        if not said:
            return Verdict(
                vname, Status.UNKNOWN, f"no answer from {service}'s /health was sampled (scenario.watch_health)"
            )
        ops = _completed(h, phase)
        if not ops:
            return Verdict(vname, Status.UNKNOWN, _none_completed(phase))

        def healthy_at(t: float) -> bool:
            before = [val for ts, val in said if ts <= t]
            return bool(before) and before[-1] == 1.0

        lies = [o for o in ops if o.outcome is not Outcome.OK and healthy_at(o.complete.t)]
        fault, heal = h.first_fault_t(), h.last_heal_t()
        during = [val for t, val in said if fault is not None and heal is not None and fault <= t <= heal]
        shown = (
            f"; during the fault it said 200 in {sum(1 for val in during if val == 1.0)} of {len(during)} answers"
            if during
            else ""
        )
        if lies:
            ev = "; ".join(f"{_op_label(o)} ended {o.outcome.value} {o.complete.error[:80]}" for o in lies[:3])
            return Verdict(
                vname, Status.FAIL, f"{len(lies)} of {len(ops)} failed while {service}'s /health said 200: {ev}{shown}"
            )
        return Verdict(vname, Status.PASS, f"{len(ops)} requests, none failed while /health said 200{shown}")

    return check


def not_ready_before_gone(service: str) -> Check:
    """Once the fault began (a SIGTERM), ``service``'s readiness probe (an engine's /health,
    smg's /readiness) answered non-200 before it stopped answering at all: readiness fails
    while it still serves, so a load balancer stops sending it work before its port goes
    dark (smg #876, three-phase shutdown).
    Needs ``scenario.watch_health(service)``."""

    @_named(f"not_ready_before_gone({service})")
    def check(h: History) -> Verdict:
        vname = check.__name__
        start = h.first_fault_t()
        if start is None:
            return Verdict(vname, Status.UNKNOWN, "no fault in the history")
        probes = [p for p in h.of(Sample) if p.source == HEALTH and p.t >= start]
        unready = next((p.t for p in probes if p.values.get(service) == 0.0), None)
        gone = next((p.t for p in probes if service not in p.values), None)
        if unready is not None and (gone is None or unready < gone):
            shown = f", no answer from +{gone - start:.2f}s" if gone is not None else ""
            return Verdict(vname, Status.PASS, f"readiness answered non-200 from +{unready - start:.2f}s{shown}")
        if gone is not None:
            return Verdict(
                vname,
                Status.FAIL,
                f"readiness went from 200 to no answer at +{gone - start:.2f}s, never saying it was not ready",
            )
        return Verdict(
            vname,
            Status.UNKNOWN,
            f"{len(probes)} readiness probes after the fault, none answered non-200 or went unanswered",
        )

    return check


def statuses_in(allowed: Collection[int], *, phase: Phase, why: str) -> Check:
    """Every request of ``phase`` was answered with an HTTP status in ``allowed``: e.g. a
    request the client got wrong is refused with a 4xx, never a 5xx (which charges the
    worker). A request with no status (it never got an answer) does not hold."""
    shown = (
        f"{min(allowed)}-{max(allowed)}" if isinstance(allowed, range) else ",".join(str(a) for a in sorted(allowed))
    )

    @_named(f"statuses_in({shown}, {Phase(phase).value}: {why})")
    def check(h: History) -> Verdict:
        vname = check.__name__
        ops = _completed(h, phase)
        if not ops:
            return Verdict(vname, Status.UNKNOWN, _none_completed(phase))
        bad = [o for o in ops if o.complete.status not in allowed]
        if bad:
            ev = "; ".join(
                f"{_op_label(o)} got {o.complete.status} ({o.outcome.value}) {o.complete.error[:100]}" for o in bad[:3]
            )
            return Verdict(vname, Status.FAIL, f"{len(bad)} of {len(ops)} outside {shown}: {ev}")
        return Verdict(
            vname, Status.PASS, f"all {len(ops)} answered {', '.join(sorted({str(o.complete.status) for o in ops}))}"
        )

    return check


def refused_within(status: int, within_s: float, *, phase: Phase) -> Check:
    """Every request of ``phase`` answered ``status`` got that answer within ``within_s`` of
    its send: a refusal is shed at the door, not after the request waited for a timeout."""

    @_named(f"refused_within({status}, {within_s:g}s, {Phase(phase).value})")
    def check(h: History) -> Verdict:
        vname = check.__name__
        refused = [(o.complete.t - o.invoke.t, o) for o in _completed(h, phase) if o.complete.status == status]
        if not refused:
            return Verdict(vname, Status.UNKNOWN, f"no request of phase {Phase(phase).value!r} was answered {status}")
        return _all_within(
            vname,
            refused,
            within_s,
            over="refusals came late",
            each="after {:.2f}s",
            passed="{n} refusals, the slowest in {worst:.2f}s",
        )

    return check


def served_or_refused(status: int, *, phase: Phase) -> Check:
    """Every request of ``phase`` either succeeded or was refused with ``status``: load
    shedding turns the excess away and serves the rest whole, it fails nothing else."""

    @_named(f"served_or_refused({status}, {Phase(phase).value})")
    def check(h: History) -> Verdict:
        vname = check.__name__
        ops = _completed(h, phase)
        if not ops:
            return Verdict(vname, Status.UNKNOWN, _none_completed(phase))
        bad = [o for o in ops if o.outcome is not Outcome.OK and o.complete.status != status]
        if bad:
            ev = "; ".join(
                f"{_op_label(o)} got {o.complete.status} and ended {o.outcome.value} {o.complete.error[:100]}"
                for o in bad[:3]
            )
            return Verdict(
                vname, Status.FAIL, f"{len(bad)} of {len(ops)} neither served nor refused with {status}: {ev}"
            )
        refused = sum(1 for o in ops if o.complete.status == status)
        return Verdict(vname, Status.PASS, f"{len(ops) - refused} served, {refused} refused with {status}")

    return check


def queued_for(gauge: Metric, at_least_s: float, *, why: str) -> Check:
    """Premise: ``gauge`` (a queue's length) stayed above 0 for ``at_least_s`` without a
    break, in consecutive samples: the load really queued there that long. Otherwise a wait
    the scenario meant to judge never happened: unknown."""
    source, metric = gauge

    @_named(f"queued_for({source}:{metric}, {at_least_s:g}s)")
    def check(h: History) -> Verdict:
        vname = check.__name__
        series = h.series(source, metric)
        if not series:
            return Verdict(vname, Status.UNKNOWN, f"no samples of {source}:{metric}")
        longest, start, peak = 0.0, None, max(val for _, val in series)
        for t, val in series:
            if val > 0:
                start = t if start is None else start
                longest = max(longest, t - start)
            else:
                start = None
        if longest < at_least_s:
            return Verdict(
                vname, Status.UNKNOWN, f"{metric} held above 0 for {longest:.2f}s at most, peak {peak:g} ({why})"
            )
        return Verdict(vname, Status.PASS, f"{metric} held above 0 for {longest:.2f}s, peak {peak:g}")

    return check


def outcomes_in(allowed: set[Outcome], *, phase: Phase | None = None) -> Check:
    """Every request that did not succeed ended in one of ``allowed`` (e.g. a proxy fault
    may cut streams: truncated is then expected, a hang never is)."""
    names = ", ".join(sorted(o.value for o in allowed))

    @_named(f"outcomes_in(ok, {names})")
    def check(h: History) -> Verdict:
        vname = check.__name__
        ops = [o for o in _completed(h, phase) if o.outcome is not Outcome.OK]
        bad = [o for o in ops if o.outcome not in allowed]
        if bad:
            ev = "; ".join(f"{_op_label(o)} ended {o.outcome.value}" for o in bad[:5])
            return Verdict(vname, Status.FAIL, f"{len(bad)} of {len(ops)} failures outside the allowed outcomes: {ev}")
        counts: dict[str, int] = {}
        for o in ops:
            counts[o.outcome.value] = counts.get(o.outcome.value, 0) + 1
        return Verdict(vname, Status.PASS, f"failures: {counts or 'none'}")

    return check


def stuck_before_router(*, router_counter: str = "smg_http_requests_total:serving") -> Check:
    """Attribution: requests sent while the fault was active never reached the router (its
    serving-request counter did not move; health checks do not count), so they were stuck in
    the client or a proxy before it."""

    @_named("stuck_before_router")
    def check(h: History) -> Verdict:
        vname = check.__name__
        inject, heal = h.first_fault_t(), h.last_heal_t()
        if inject is None or heal is None:
            return Verdict(vname, Status.UNKNOWN, "no healed fault in the history")
        during = [o for o in h.ops() if inject <= o.invoke.t <= heal and o.outcome is not Outcome.OK]
        series = h.series("router", router_counter)
        # the counter as of the first sample after the fault (a request that completed just
        # before the fault may be counted a sample late), against its maximum until the heal
        before = [v for t, v in series if inject + SAMPLE_TOLERANCE_S <= t <= heal][:1]
        inside = [v for t, v in series if inject + SAMPLE_TOLERANCE_S < t <= heal]
        if not during or not before or not inside:
            return Verdict(vname, Status.UNKNOWN, "no failed request or no router samples inside the fault window")
        grew = max(inside) - before[-1]
        if grew > 0:
            return Verdict(
                vname,
                Status.FAIL,
                f"the router counted {grew:g} requests while {len(during)} client requests were stuck: not (only) the proxy hop",
            )
        return Verdict(
            vname, Status.PASS, f"{len(during)} stuck requests; the router saw none of them: stuck before the router"
        )

    return check
