"""The one interface every target implements, and the capabilities a target may lack.

Implemented by local processes (embedded.py), Compose containers (compose.py) and a
deployment pd-chaos did not start (attach.py); chosen by name in registry.py.
"""

from __future__ import annotations

import enum
from typing import Protocol, runtime_checkable

from chaos.targets.stack import StackInfo

__all__ = [
    "ENGINES",
    "ENGINE_LINKS",
    "REAL_SGLANG",
    "REAL_SGLANG_LINKS",
    "SERVICES",
    "START_FAILURE",
    "Capability",
    "Target",
]

SERVICES = ("toxiproxy", "prefill", "decode", "router")
ENGINES = ("prefill", "decode")
# A stack that fails to start leaves its services' logs and states here, under its state dir
# (<service>.log, failure.json); the stack factory keeps them in the run's report.
START_FAILURE = "start-failure"
ENGINE_LINKS = ("kv", "control")  # engine to engine: where real engines pick their own ports, so no proxy sits


class Capability(enum.Enum):
    """What a test may need from a target; tests needing a missing one skip with a reason."""

    PROXIED_CLIENT = "proxied_client"  # clients reach the router through a Toxiproxy
    # the link can be broken: blackholed, reset, taken down, slowed to a crawl. By Toxiproxy
    # where it sits on the link (pdsim's links, an attached stack's proxies), by packet rules in
    # the stack's own network namespace where real engines pick their ports (chaos.system.netns).
    # Never for Mooncake over RDMA: its bytes cross no kernel socket.
    KV_LINK = "kv_link"  # prefill's KV to decode
    CONTROL_LINK = "control_link"  # decode's handshake with prefill (per request)
    # latency on the engine links the target can break: Toxiproxy's latency toxic, or on a
    # packet link the queue handler behind an NFQUEUE rule (chaos.faults.queued), where its
    # binding is installed (make setup-sglang) and the kernel has NFQUEUE
    LINK_DELAY = "link_delay"
    # bytes flipped on an engine link with the TCP checksums made right, so that the receiver
    # reads them: the queue handler on a packet link (no proxy can; Toxiproxy has no such toxic)
    LINK_CORRUPT = "link_corrupt"
    # packets on an engine link sent twice, the copies reordered with the rest: the queue
    # handler on a packet link. Not on a proxied link: a proxy's TCP ends at the proxy, and a
    # byte stream has no packets to send twice (Toxiproxy has no such toxic)
    LINK_DUPLICATE = "link_duplicate"
    # decode verifies the KV it receives and fails a request whose KV arrived corrupted:
    # SGLang with --disaggregation-enable-kv-checksum (off by default in 0.5.23; the
    # sglang-cpu stack's kv_checksum). Without it, decode generates from whatever KV came
    KV_VERIFIED = "kv_verified"
    PROXIED_BOOTSTRAP = "proxied_bootstrap"
    PROCESS_CONTROL = "process_control"  # kill/freeze/restart services
    DEFECTS = "defects"  # engines honour PDSIM_DEFECTS (pdsim only)
    # prefill fails rooms pinned in its inflight queue after inflight_s: the incident's patched
    # engine, which pdsim models; upstream SGLang (0.5.9, 0.5.23) has no such watchdog
    INFLIGHT_WATCHDOG = "inflight_watchdog"
    # engine queue gauges follow the queues at every scheduler step: pdsim's /metrics, or
    # SGLang's /v1/loads (0.5.23). SGLang's /metrics sets decode's prealloc/transfer gauges
    # only when decode logs a batch, so a trigger or a leak check on them alone can miss a
    # room that waits while decode runs nothing.
    LIVE_QUEUE_GAUGES = "live_queue_gauges"
    # the engines' /metrics says what their /v1/loads says, at every scheduler step: pdsim.
    # SGLang 0.5.23 refreshes its /metrics gauges only when a batch is logged, so they keep
    # old values while nothing runs (docs/known-issues.md): the two pages disagree there
    LIVE_METRICS_PAGE = "live_metrics_page"
    # a request's KV transfer can last long enough (hundreds of ms) for a trigger on decode's
    # transfer queue, sampled at 10 Hz, to act inside it (``faults.transfer_window()``):
    # pdsim's forward and KV costs are set so; a real engine's KV link crawls by packet
    # shaping for the block. The tiny model on real SGLang moves its KV in milliseconds: left
    # alone, the trigger never sees the room (measured: 30 s of samples, never above 0).
    TRANSFER_WINDOW = "transfer_window"
    # decode frees the KV of a request whose transfer failed at once: pdsim. SGLang 0.5.23
    # defers it until prefill acks that it stopped writing, or its deferred-release timeout
    # (30 s by default); after a transfer a reset kv link failed, no ack comes
    # (docs/known-issues.md)
    FAILED_TRANSFER_FREED_AT_ONCE = "failed_transfer_freed_at_once"
    # decode fetches a prefill's route (its bootstrap server's /route) off the loop that
    # decodes, so a stalled bootstrap link holds only the requests that need it: pdsim.
    # SGLang 0.5.23 fetches it inside its scheduler loop (requests.get, 5 s timeout) whenever
    # none is cached, as once its heartbeat gave that prefill up: every stream on decode stops
    # meanwhile (docs/known-issues.md)
    ROUTE_FETCH_OFF_THE_LOOP = "route_fetch_off_the_loop"
    # decode fails every request bound for a prefill whose KV pages hold another number of
    # tokens than its own, at once, with an error naming the page sizes, and serves on: pdsim.
    # SGLang 0.5.23 raises that error inside its scheduler loop (try_ensure_parallel_info) and
    # the whole decode server exits (docs/known-issues.md)
    MISMATCH_REFUSED = "mismatch_refused"
    # a restarted prefill serves its control channel from new ports (the rank ports its
    # bootstrap server gives): real SGLang picks its ZMQ port at each start; pdsim does in an
    # embedded stack that asks (StackConfig.fixed_control_port off), else it sits behind the
    # stack's fixed control proxy
    FRESH_RANK_PORTS = "fresh_rank_ports"
    # decode drops a prefill's cached route when its control channel fails, and fetches it
    # again: pdsim, as SGLang after sglang#36029. SGLang 0.5.23 keeps it until its heartbeat
    # gives that prefill up, so a prefill back on new rank ports is never reached
    # (docs/known-issues.md)
    STALE_ROUTE_DROPPED = "stale_route_dropped"


# What a stack of real SGLang engines (0.5.23, on every target that starts them) offers:
# Mooncake's KV and the ZMQ control messages go straight from engine to engine on random
# ports, so only the client and bootstrap links are proxied; no pdsim defects, no inflight
# watchdog (upstream has none); live queue gauges from its /v1/loads.
REAL_SGLANG = frozenset(
    {
        Capability.PROXIED_CLIENT,
        Capability.PROXIED_BOOTSTRAP,
        Capability.PROCESS_CONTROL,
        Capability.LIVE_QUEUE_GAUGES,
        Capability.FRESH_RANK_PORTS,
    }
)
REAL_SGLANG_LINKS = ("client_router", "bootstrap")


@runtime_checkable
class Target(Protocol):
    """Start, stop, kill (SIGKILL), terminate (SIGTERM), freeze (SIGSTOP), thaw and restart a
    service; read logs."""

    info: StackInfo
    capabilities: frozenset[Capability]

    def start(self, service: str) -> None: ...

    def stop(self, service: str) -> None: ...

    def kill(self, service: str) -> None: ...

    def terminate(self, service: str) -> None:
        """SIGTERM to the service's main process only, as an orchestrator stopping it
        sends; returns at once (how it drains and exits is the service's business)."""
        ...

    def freeze(self, service: str) -> None: ...

    def thaw(self, service: str) -> None: ...

    def restart(self, service: str) -> None: ...

    def is_running(self, service: str) -> bool: ...

    def is_frozen(self, service: str) -> bool: ...

    def main_pid(self, service: str) -> int | None:
        """The host PID of the service's main process (its tree is the service), or None
        when it is not running or not on this host: a soak reads memory and open files there."""
        ...

    def logs(self, service: str) -> str: ...

    def down(self) -> None: ...
