"""The PD pipeline, written once: the hops a request passes on its way through the stack,
the gauge that counts the requests waiting in each, and the engine log states that place a
request there.

Everything that names a hop reads this table: the suites' leak lists
(``ENGINE_QUEUES``, ``ROUTER_INFLIGHT``), the timeline's gauge panel, the where-is-it-stuck
table (``STATE_HOP``, hop order) and the doctor's hop statistics. A hop added here is
sampled, drawn, diagnosed and leak-checked everywhere at once.

``Metric`` is the typed selector for one series of one source: ``Metric("router",
"smg_worker_requests_active").at(worker)`` instead of spelling the sampler's ``name:label`` key.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from chaos.system.topology import first_of_kind

__all__ = [
    "BEFORE_ROUTER",
    "CIRCUIT_FAILURES",
    "CIRCUIT_TRANSITIONS",
    "DECODE_TRANSFER_FAILED",
    "DECODE_TRANSFER_QUEUE",
    "DECODE_UNSTAGED",
    "ENGINE_QUEUES",
    "HOPS",
    "KV_IN_USE",
    "PIPELINE",
    "PREFILL_BOOTSTRAP_FAILED",
    "PREFILL_TRANSFER_FAILED",
    "PREFILL_UNSTAGED",
    "ROUTER_INFLIGHT",
    "SCHEDULER_PASS_S",
    "STATE_HOP",
    "TERMINAL_STATES",
    "WORKER_HEALTHY",
    "Hop",
    "Metric",
    "on_engines",
]

SCHEDULER_PASS_S = 1.0  # an engine's scheduler loop acts on a finished or aborted request within this


class Metric(NamedTuple):
    """One series of one sampled source (router, prefill, decode, toxiproxy). A tuple, so a
    list of them is what the sampler and the verdicts take as ``gauges``."""

    source: str
    name: str

    def at(self, worker: str, kind: str = "") -> "Metric":
        """The same metric for one worker: smg labels its per-worker series by the worker's
        URL, which the sampler keeps as ``name:url``; with ``kind``, one outcome or state
        entered of it (``name:url:failure``, ``name:url:open``)."""
        return Metric(self.source, f"{self.name}:{worker}:{kind}" if kind else f"{self.name}:{worker}")

    def __str__(self) -> str:
        return f"{self.source}:{self.name}"


def on_engines(metrics: "tuple[Metric, ...] | list[Metric]", engines: "tuple[str, ...]") -> tuple[Metric, ...]:
    """``metrics`` of the first prefill and decode, read on every engine of their kind among
    ``engines`` (a topology's: ``prefill2``'s queues as ``prefill``'s); the rest as they are."""
    out: list[Metric] = []
    for m in metrics:
        kin = [e for e in engines if first_of_kind(e) == m.source] if m.source in ("prefill", "decode") else []
        out += [Metric(e, m.name) for e in kin] or [m]
    return tuple(out)


@dataclass(frozen=True)
class Hop:
    """A place a request waits. ``gauges`` count the requests in it (the first is the one
    the doctor and the timeline read; none for a hop only the logs show); ``states`` are the
    engine log states that put a request here; ``progress`` the counters that move when
    requests leave it (flat progress under a non-zero gauge is a hang, not load)."""

    name: str
    service: str  # client | router | prefill | decode
    gauges: tuple[str, ...] = ()
    states: tuple[str, ...] = ()
    progress: tuple[str, ...] = ()
    label: str = ""  # the timeline's legend

    @property
    def gauge(self) -> Metric | None:
        return Metric(self.service, self.gauges[0]) if self.gauges else None


BEFORE_ROUTER = "client or proxy before the router"
PREFILL_UNSTAGED = "prefill, stage not logged"  # SGLang: between its Receive: and Finish: lines
DECODE_UNSTAGED = "decode, stage not logged"
TERMINAL_STATES = frozenset({"finished", "failed", "aborted"})

_PREFILL_OUT = (
    "prompt_tokens_total",
    "num_requests_total",
    "num_bootstrap_failed_reqs_total",
    "num_transfer_failed_reqs_total",
    "num_aborted_requests_total",
)
_DECODE_OUT = (
    "generation_tokens_total",
    "num_requests_total",
    "num_bootstrap_failed_reqs_total",
    "num_transfer_failed_reqs_total",
    "num_aborted_requests_total",
)

PIPELINE: tuple[Hop, ...] = (
    Hop(BEFORE_ROUTER, "client"),
    Hop(
        "router",
        "router",
        ("smg_worker_requests_active", "smg_admission_inflight"),
        progress=("smg_router_request_duration_seconds_count", "smg_http_responses_total"),
        label="router in-flight",
    ),
    Hop(PREFILL_UNSTAGED, "prefill", states=("open",)),
    Hop(
        "prefill bootstrap",
        "prefill",
        ("num_prefill_bootstrap_queue_reqs",),
        ("received", "bootstrap_queue"),
        _PREFILL_OUT,
        "prefill bootstrap q",
    ),
    Hop("prefill forward", "prefill", ("num_queue_reqs",), ("waiting",), _PREFILL_OUT, "prefill waiting q"),
    Hop(
        "prefill inflight",
        "prefill",
        ("num_prefill_inflight_queue_reqs",),
        ("inflight",),
        _PREFILL_OUT,
        "prefill inflight q",
    ),
    Hop(DECODE_UNSTAGED, "decode", states=("open",)),
    Hop(
        "decode prealloc",
        "decode",
        ("num_decode_prealloc_queue_reqs",),
        ("received", "prealloc_queue"),
        _DECODE_OUT,
        "decode prealloc q",
    ),
    Hop(
        "decode transfer",
        "decode",
        ("num_decode_transfer_queue_reqs",),
        ("transfer_queue", "transferring"),
        _DECODE_OUT,
        "decode transfer q",
    ),
    Hop("decode running", "decode", ("num_running_reqs",), ("running",), _DECODE_OUT, "decode running"),
)

# Decode's log line when its heartbeat gives a prefill up (SGLang's common/conn.py; pdsim's too)
PREFILL_LOST = "Lost connection with prefill instance"

# The watchdogs' failure counters: what a fired bootstrap, waiting or inflight timeout bumps.
PREFILL_BOOTSTRAP_FAILED = Metric("prefill", "num_bootstrap_failed_reqs_total")
PREFILL_TRANSFER_FAILED = Metric("prefill", "num_transfer_failed_reqs_total")
DECODE_TRANSFER_FAILED = Metric("decode", "num_transfer_failed_reqs_total")
DECODE_TRANSFER_QUEUE = Metric("decode", "num_decode_transfer_queue_reqs")
PREFILL_INFLIGHT_QUEUE = Metric("prefill", "num_prefill_inflight_queue_reqs")  # forward done, KV not yet delivered

CIRCUIT_FAILURES = Metric(
    "router", "smg_worker_cb_outcomes_total"
)  # per worker and outcome (.at(url, "failure")): what smg charged
CIRCUIT_TRANSITIONS = Metric(
    "router", "smg_worker_cb_transitions_total"
)  # per worker and state entered (.at(url, "open")): a circuit opened

WORKER_HEALTHY = Metric("router", "smg_worker_health")  # per worker (.at(url)): 1 while smg routes to it, 0 once out

HOPS: tuple[str, ...] = tuple(
    h.name for h in PIPELINE
)  # pipeline order: the earliest hop a request never left is where it is stuck
STATE_HOP: dict[tuple[str, str], str] = {(h.service, s): h.name for h in PIPELINE for s in h.states}
ENGINE_QUEUES: tuple[Metric, ...] = tuple(
    Metric(h.service, g) for h in PIPELINE if h.service in ("prefill", "decode") for g in h.gauges
)
ROUTER_INFLIGHT: tuple[Metric, ...] = tuple(
    Metric(h.service, g) for h in PIPELINE if h.service == "router" for g in h.gauges
)
# KV tokens held for requests on each engine (SGLang counts its radix cache's evictable
# tokens as free): back to its baseline once the engines are quiet, or KV leaked
KV_IN_USE: tuple[Metric, ...] = (Metric("prefill", "num_used_tokens"), Metric("decode", "num_used_tokens"))
