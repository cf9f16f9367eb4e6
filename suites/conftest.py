"""Scenario helpers shared by the suites: the gauges a leak check watches."""

from __future__ import annotations

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
