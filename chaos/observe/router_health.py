"""What smg's health checker has seen of the engines, for the steady state before a test.

A fault that makes smg's health checks of an engine time out (a freeze, a stalled link)
leaves one check in flight when it heals, and that check can still fail after the heal:
smg 1.13 then counts it among the consecutive failures and turns the engine NotReady
seconds after service came back (its third failed check of a 14 s decode freeze landed
0.2 s after the thaw, after the next test's steady probe had passed; smg refused every
request for 3 s). A probe that succeeds does not show that; smg's counters do."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import httpx
from prometheus_client.parser import text_string_to_metric_families

from chaos.system.wait import HTTP_CALL_S, PROBE, wait_until

__all__ = ["HealthChecks", "close_breakers", "read_health_checks", "unclosed_breakers", "wait_out_failed_checks"]

_CHECKS = "smg_worker_health_checks_total"  # counter by worker_type and result
_HEALTH = "smg_worker_health"  # gauge by worker: 1 healthy, 0 not
_BREAKER = "smg_worker_cb_state"  # gauge by worker: 0 closed, 1 open, 2 half-open (smg's metrics.rs)
_BREAKER_STATES = {1.0: "open", 2.0: "half-open"}


@dataclass(frozen=True)
class HealthChecks:
    """smg's health checks so far, by worker type (prefill, decode), and whether it holds
    every worker healthy now."""

    succeeded: dict[str, float]
    failed: dict[str, float]
    all_healthy: bool


def read_health_checks(metrics_url: str) -> HealthChecks | None:
    """One read of smg's metrics page; None where the page has no health checks (a router
    other than smg, or health checks turned off)."""
    page = PROBE.get(metrics_url, timeout=HTTP_CALL_S).text
    counts: dict[str, dict[str, float]] = {"success": {}, "failure": {}}
    healthy, seen = True, False
    for family in text_string_to_metric_families(page):
        for s in family.samples:
            if s.name == _CHECKS and s.labels.get("result") in counts:
                seen = True
                kind, worker_type = counts[s.labels["result"]], s.labels.get("worker_type", "")
                kind[worker_type] = kind.get(worker_type, 0.0) + s.value
            elif s.name == _HEALTH and s.value != 1:
                healthy = False
    return HealthChecks(counts["success"], counts["failure"], healthy) if seen else None


# the counts each router's page showed at the end of the last steady wait, by its URL: what
# failed since is a fault's doing (one process's own record; each xdist worker has its stacks)
_last_seen: dict[str, HealthChecks] = {}


def wait_out_failed_checks(metrics_url: str, *, timeout_s: float) -> None:
    """If smg's health checks of an engine type failed since the last call for this router
    (or ever, on the first), wait until one of its checks succeeds after now and smg holds
    every worker healthy: a check that was in flight at the heal has then landed. Free when
    nothing failed; otherwise a check's timeout and an interval or two once the engines
    answer. A page that cannot be read is no evidence either way: no wait. A router that
    never gets there is a ``TargetError`` after ``timeout_s``."""
    try:
        start = read_health_checks(metrics_url)
    except httpx.HTTPError:
        return
    if start is None:
        return
    before = _last_seen.get(metrics_url)
    failed = [t for t, n in start.failed.items() if n > (before.failed.get(t, 0.0) if before else 0.0)]
    passed_before = start.succeeded

    def landed() -> HealthChecks | None:
        seen = read_health_checks(metrics_url)
        if seen and seen.all_healthy and all(seen.succeeded.get(t, 0.0) > passed_before.get(t, 0.0) for t in failed):
            return seen
        return None

    last = start
    if failed:
        last = (
            wait_until(
                landed,
                timeout_s=timeout_s,
                what=f"smg to count a {' and a '.join(failed)} health check passed after its failed ones, "
                "every worker healthy",
                interval_s=0.1,
            )
            or start
        )
    _last_seen[metrics_url] = last


def unclosed_breakers(metrics_url: str) -> dict[str, str]:
    """smg's circuit breakers that are not closed now: worker URL -> open or half-open."""
    page = PROBE.get(metrics_url, timeout=HTTP_CALL_S).text
    return {
        s.labels.get("worker", "?"): _BREAKER_STATES.get(s.value, str(s.value))
        for family in text_string_to_metric_families(page)
        for s in family.samples
        if s.name == _BREAKER and s.value != 0
    }


def close_breakers(metrics_url: str, probe: Callable[[], object], *, timeout_s: float) -> None:
    """Until every circuit breaker of smg's is closed, sending a probe while one is not. A
    breaker a test left open or half-open is the next test's premise otherwise: smg 1.13 closes
    a half-open breaker only after consecutive successes, so with no traffic it stays half-open
    for good, and the next test's first failure opens it again at once (a kv_link test left
    prefill's half-open, and the retry-budget test after it saw "No available prefill workers
    (all circuits open or unhealthy)" at its first failure, never a retry). A page that cannot
    be read is no evidence either way: no wait. ``TargetError`` after ``timeout_s``."""

    def closed() -> bool:
        try:
            if not unclosed_breakers(metrics_url):
                return True
        except httpx.HTTPError:
            return True
        probe()  # successes are what close a half-open breaker
        return False

    wait_until(closed, timeout_s=timeout_s, what="every smg circuit breaker closed", interval_s=0.2)
