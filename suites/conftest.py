"""Scenario helpers shared by the suites: the gauges a leak check watches, smg's per-worker
request count (a prompt trigger on every engine), and the
aftermath every fault scenario checks."""

from __future__ import annotations

from chaos import verdicts as v
from chaos.bounds import Bounds
from chaos.sampler import Sampler
from chaos.targets.base import Target
from chaos.triggers import Signal, gauge
from chaos.workloads import Workload

ENGINE_QUEUES = [
    ("prefill", "num_prefill_bootstrap_queue_reqs"),
    ("prefill", "num_prefill_inflight_queue_reqs"),
    ("prefill", "num_queue_reqs"),
    ("decode", "num_decode_prealloc_queue_reqs"),
    ("decode", "num_decode_transfer_queue_reqs"),
    ("decode", "num_running_reqs"),
]
ROUTER_INFLIGHT = [
    ("router", "smg_worker_requests_active"),
    ("router", "smg_admission_inflight"),
]


def requests_at(stack: Target, service: str) -> Signal:
    """How many requests smg has at one worker: prompt on every engine (unlike SGLang's own
    queue gauges), so scenarios that hold prefill trigger on it."""
    return gauge("router", f"smg_worker_requests_active:{stack.info.endpoints[service]}")


def aftermath(workload: Workload, sampler: Sampler, bounds: Bounds, *, gauges: list[tuple[str, str]], within_s: float) -> list[v.Check]:
    """After the heal: a fresh request must succeed, and the gauges must return to their
    baseline once the system is quiet. Sends the probe and samples until quiet (bounded),
    then returns the two verdicts that judge it."""
    workload.probe_until_ok(within_s=bounds.recovery_s)
    sampler.wait_quiet(gauges, within_s=within_s)
    return [v.no_leak(gauges=gauges, within_s=within_s, since="quiet"), v.recovers(within_s=bounds.recovery_s)]
