"""The scenario kit: one run's lifecycle, judged from its history whatever the body did.

    def test_decode_killed(scenario, workload, faults, bounds):
        scenario.baseline(agents=2, rounds=2)                       # fault-free reference
        scenario.judge(v.every_request_terminal(within_s=...), v.replies_match_baseline())
        with faults.kill("decode", when=scenario.requests_at("decode") > 0):
            workload.conversations(agents=2, rounds=2, phase=Phase.FAULT).run()
        scenario.settle(ENGINE_QUEUES + ROUTER_INFLIGHT, within_s=bounds.slack_s)

Run, then judge (Jepsen's client, nemesis, checker): the body acts and records; the
verdicts it declares with ``judge`` are evaluated once it has ended, by the plugin. When the
body raises (a trigger that never fired, a premise not met, a bug in the rig) they are
evaluated all the same and written into the history and the report, so an errored run still
shows what its history proves; the body's exception stays the test's outcome. A scenario
that declares no verdict is an error: it could not fail.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any, Collection, Iterable

import httpx
from tenacity import RetryError, Retrying, retry_if_result, stop_after_delay, wait_fixed

from chaos import verdicts as v
from chaos.clients.workloads import Workload
from chaos.errors import RigError
from chaos.observe.growth import CHECKPOINT, Limit
from chaos.observe.history import History
from chaos.observe.logs import LogCursor, capture_logs
from chaos.observe.pipeline import KV_IN_USE, Metric, on_engines
from chaos.observe.records import Phase, TriggerFired
from chaos.observe.sampler import PROCS, PROCS_INTERVAL_S, Sampler
from chaos.observe.triggers import Condition, Signal, gauge, log_line, received, streaming_through, streams_begun
from chaos.reports.growth import render_growth
from chaos.run.bounds import Bounds
from chaos.system.wait import HTTP_CALL_S, PROBE
from chaos.targets.base import Capability, Target

__all__ = ["QUIET_MARGIN_S", "REQUESTS_AT_WORKER", "WINDOW_GRACE_S", "NoVerdict", "Scenario"]

QUIET_MARGIN_S = 1.0  # sampling past a leak bound, so that its window is covered by samples
WINDOW_GRACE_S = 2.0  # past a verdict's window: two scrapes of a slow source (0.5 s timeout each) and then some
REQUESTS_AT_WORKER = Metric("router", "smg_worker_requests_active")
HEALTH_PATHS = {"router": "/readiness"}  # what a load balancer asks smg; an engine's is /health


class NoVerdict(RigError):
    """The scenario ended without declaring a verdict: it tested nothing."""


@dataclass
class Scenario:
    """The ``scenario`` fixture. ``judge`` declares verdicts; ``baseline`` and ``settle``
    are the phases before and after the fault, with the bounds they need built in."""

    target: Target
    history: History
    sampler: Sampler
    workload: Workload
    bounds: Bounds
    engine_logs: LogCursor | None = None  # read into the history before premises and verdicts are judged
    checks: list[v.Check] = field(default_factory=list)

    def judge(self, *checks: v.Check, by: str = "test") -> None:
        """Declare verdicts; all of them are judged once the body ends, in order, and each
        is reported with who declared it (``by``: the test, or the kit's ``settle``). A
        premise is not a verdict: ``require`` checks it."""
        premises = [c.name for c in checks if c.role is v.Role.PREMISE]
        if premises:
            raise TypeError(f"judge takes verdicts, not premises: {', '.join(premises)} (scenario.require)")
        self.checks.extend(replace(c, by=by) for c in checks)

    def require(self, *premises: v.Check) -> None:
        """Check the run's premise now (the fault landed, requests were in flight): one
        that did not hold ends the run as an error, ``PremiseNotMet``; it tested nothing."""
        self._read_logs()
        v.require(self.history, *premises)

    def baseline(self, **conversation: Any) -> None:
        """Fault-free conversations whose replies are the reference (``Phase.BASELINE``)."""
        self.workload.conversations(**conversation, phase=Phase.BASELINE).run()

    def settle(self, gauges: Iterable[Metric], *, within_s: float, ready: Collection[str] = ()) -> list[v.Check]:
        """After the heal: quiet, then recovery. Every gauge, and the KV tokens in use on each
        engine the gauges name (``KV_IN_USE``), must be back to its baseline within ``within_s``
        of the moment the system went quiet; a fresh request must succeed within the target's
        recovery bound (counted, for ``ready`` services, from when their watched /health
        answered 200 again: ``v.recovers``); smg must have charged failures only to the engines
        a fault struck, and no request decode failed at every attempt may have succeeded. All
        are judged (``no_leak``, ``recovers``, ``charged_only_where_struck``: the circuit
        breakers' oracle on every fault scenario, ``failures_reach_the_client``).

        The recovery probe goes only once the leak window is covered: a request would wake an
        idle engine, and a free left for "the next step" would then be done by the rig's own
        probe, a leak hidden. Returns the checks; each is reported as declared by ``settle``."""
        gauges = list(gauges)
        engines = {source for source, _ in gauges}
        kv = on_engines(KV_IN_USE, tuple(sorted(engines)))
        gauges = [*gauges, *(m for m in kv if m.source in engines and m not in gauges)]
        added = [
            v.no_leak(gauges=gauges, within_s=within_s, since=v.Since.QUIET),
            v.recovers(within_s=self.bounds.recovery_s, ready=ready),
            v.charged_only_where_struck(self.workers()),
            v.failures_reach_the_client(),
        ]
        self.judge(*added, by="settle")
        quiet = self.sampler.wait_quiet(gauges, within_s=within_s + QUIET_MARGIN_S)
        self.workload.probe_until_ok(within_s=self.bounds.recovery_s)
        # the probe's own request raises the gauges it passes; a run that ended with it would
        # leave them up at the end of the leak window (CI at 2b4841e: decode's running count
        # 1 at +0.12 s, the last sample), so the gauges are seen back once more. A gauge that
        # never came back has already held past its window: waiting it out again shows nothing
        if quiet:
            self.sampler.wait_quiet(gauges, within_s=within_s + QUIET_MARGIN_S)
        return added

    def watch_health(self, *services: str) -> None:
        """Probe these services' readiness from now on, as a checker would: an engine's
        ``/health``, smg's ``/readiness`` (``v.health_tells_truth`` and
        ``v.not_ready_before_gone`` judge what they said)."""
        self.sampler.watch_health({s: self.target.info.endpoints[s] + HEALTH_PATHS.get(s, "/health") for s in services})

    def watch_processes(self, *services: str) -> None:
        """Read these services' process trees (memory, open files) from now on, where the
        target runs them on this host (``procs`` source; a soak's ``does_not_grow``)."""
        self.sampler.watch_processes({s: partial(self.target.main_pid, s) for s in services})

    def checkpoint(self, gauges: Iterable[Metric], *, within_s: float) -> None:
        """A soak's checkpoint: wait (bounded) until every gauge reads 0, then mark the
        moment; ``does_not_grow`` reads its quantities there. A system still busy after
        ``within_s`` is marked all the same: what it holds then is the growth to judge."""
        quiet = (
            "quiet" if self.sampler.wait_quiet(list(gauges), within_s=within_s) else f"still busy after {within_s:g}s"
        )
        now = self.history.now()

        def processes_read() -> bool:  # a reading of the process trees taken after the wait, not before
            last = self.sampler.latest(PROCS)
            return last is None or last.t >= now

        self.sampler.poll(processes_read, timeout_s=2 * PROCS_INTERVAL_S, what="a reading of the process trees")
        self.history.append(TriggerFired(self.history.now(), CHECKPOINT, quiet))

    def report_growth(self, limits: Iterable[Limit]) -> None:
        """Draw the soak's growth report beside the test's history (``soak.png``, ``soak.md``)."""
        if self.history.path is not None:
            render_growth(self.history, list(limits), self.history.path.parent)

    def flush_cache(self, service: str) -> None:
        """``/flush_cache`` on an engine, so that the next reply owes nothing to what it
        cached. SGLang flushes only an idle engine and answers 400 otherwise, so it is asked
        again until it answers 200, within the recovery bound; an engine that never does is
        a ``RigError``."""
        url = f"{self.target.info.endpoints[service]}/flush_cache"

        def answer() -> int | str:
            try:
                return PROBE.post(url, timeout=HTTP_CALL_S).status_code
            except httpx.HTTPError as exc:
                return type(exc).__name__

        retry = Retrying(
            stop=stop_after_delay(self.bounds.recovery_s),
            wait=wait_fixed(0.1),
            retry=retry_if_result(lambda status: status != 200),
        )
        try:
            retry(answer)
        except RetryError as gave_up:
            raise RigError(
                f"{service} would not flush its cache: last answer {gave_up.last_attempt.result()}"
            ) from None

    def has(self, capability: Capability) -> bool:
        """Whether the target has a capability (a bound may depend on it)."""
        return capability in self.target.capabilities

    def worker(self, service: str) -> str:
        """The label smg gives ``service``'s per-worker series (its URL)."""
        return self.target.info.endpoints[service]

    def workers(self) -> dict[str, str]:
        """Each engine (every one of the stack's topology) with the label smg gives its per-worker series."""
        return {engine: self.worker(engine) for engine in self.target.info.topology.engines}

    def at_worker(self, metric: Metric, service: str, kind: str = "") -> Metric:
        """A per-worker router metric for one engine, e.g. its circuit breaker's state; with
        ``kind``, one outcome or state entered of it (``CIRCUIT_TRANSITIONS``, ``"open"``)."""
        return metric.at(self.worker(service), kind)

    def requests_at(self, service: str) -> Signal:
        """How many requests smg has at one worker: prompt on every engine (unlike SGLang's
        own queue gauges), so scenarios that hold an engine trigger on it."""
        return gauge(*self.at_worker(REQUESTS_AT_WORKER, service))

    def streams_begun(self, n: int = 1) -> Condition:
        """Holds once ``n`` of this test's streams have received bytes and are still open."""
        return streams_begun(self.history, n)

    def received(self, service: str) -> Condition:
        """Holds once ``service`` has received one of this test's requests, by its log (from
        the test's start): prompt however briefly the engine holds it."""
        since = self.engine_logs.began.get(service, 0) if self.engine_logs is not None else 0
        return received(self.history, service, lambda: self.target.logs(service), since)

    def streaming_through(self, service: str) -> Condition:
        """Holds while a stream ``service`` received (by its log) is open with bytes: with two
        engines of a kind, one of them has a request in flight, whichever its twin has."""
        since = self.engine_logs.began.get(service, 0) if self.engine_logs is not None else 0
        return streaming_through(self.history, service, lambda: self.target.logs(service), since)

    def logs(self, service: str, pattern: str) -> Condition:
        """Holds once ``service`` logs a line matching ``pattern`` from now on: for what an
        engine says and no gauge shows (decode giving a prefill up, say)."""
        return log_line(self.target, service, pattern)

    def _read_logs(self) -> None:
        """What the engines and the router logged of each request so far joins the history,
        for the verdicts and premises that count from logs (retry amplification)."""
        if self.engine_logs is not None:
            capture_logs(self.history, self.engine_logs, {op.invoke.op for op in self.history.ops()})

    def _observe_windows(self) -> None:
        """Keep sampling until each windowed verdict's window has closed on its sources, or
        it has passed (``v.Window``): bounded by the window's end and a grace. A window the
        samples still do not cover is judged as it is, and says so (unknown, never pass)."""
        for check in self.checks:
            closes = None if check.window is None else check.window(self.history)
            if closes is None:
                continue

            def covered(check: v.Check = check, closes: float = closes) -> bool:
                sampled = all(
                    (s := self.sampler.latest(source)) is not None and s.t >= closes for source in check.sources
                )
                return sampled or check(self.history).status is v.Status.PASS

            self.sampler.poll(
                covered,
                timeout_s=max(0.0, closes - self.history.now()) + WINDOW_GRACE_S,
                what=f"samples through the window of {check.name}",
            )

    def conclude(self, *, body_failed: bool, known: Collection[v.KnownIssue] = ()) -> list[v.Verdict]:
        """Judge the declared verdicts and record them. Raises ``VerdictFailed`` if one did
        not pass and the body did not fail first; ``NoVerdict`` if none was declared;
        ``KnownIssueSeen`` if only verdicts ``known`` names failed (``v.raise_unless_passed``)."""
        if not self.checks:
            if body_failed:
                return []
            raise NoVerdict("the scenario declared no verdict (scenario.judge): it could not fail")
        if not body_failed:
            self._observe_windows()
        self._read_logs()
        verdicts = v.record(self.history, v.evaluate(self.history, self.checks))
        if not body_failed:
            v.raise_unless_passed(verdicts, known)
        return verdicts
