"""What a running stack is: ports, endpoints, proxies, services, and its configuration.

``StackInfo`` is written to ``<state_dir>/stack.json`` by ``pdchaos up`` and read by
``pdchaos status``/``down``, by the pytest plugin and by users' own scripts: it is the one
description of a stack, whoever started it.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from chaos.errors import ConfigError
from chaos.system.ports import LOOPBACK, STACK_PORTS, PortPlan  # the layout's public names, here too
from chaos.system.topology import Topology, first_of_kind, link_of
from chaos.system.wait import STATE_CHANGE_S

__all__ = [
    "LOADS_PATH",
    "LOOPBACK",
    "PROXIES",
    "STACK_PORTS",
    "FailureHooks",
    "PortPlan",
    "StackConfig",
    "StackInfo",
    "Timeouts",
]

# name -> (what it connects); the four links the suites break
PROXIES = ("client_router", "bootstrap", "control", "kv")
# SGLang's live queue counts (0.5.23): published by the scheduler at every prefill batch,
# every --load-snapshot-publish-interval decode steps, every 50 ms while a queue stalls, and
# at once when idle; /metrics' queue gauges move only when decode logs a batch.
LOADS_PATH = "/v1/loads?include=core,disagg&format=prometheus"


@dataclass(frozen=True)
class Timeouts:
    """The engines' PD timeouts (SGLang's environment variables), in seconds.

    Defaults are short so that tests run in seconds; values set in the environment of
    ``pdchaos up`` or ``pytest`` win, exactly as they would for SGLang. The inflight
    watchdog is the backstop, so it is set above decode's waiting timeout: in a KV stall
    decode gives up first and aborts the prefill room; the watchdog frees what nobody else
    will (a dead or frozen decode).
    """

    bootstrap_s: int = 3
    waiting_s: int = 6
    inflight_s: int = 10
    heartbeat_interval_s: float = 2.0
    heartbeat_max_failure: int = 2
    # SGLang 0.5.23's prefill blacklists a decode's Mooncake session after a failed transfer
    # and probes it again every interval, doubling up to the max (30 s and 300 s by default):
    # after a KV link comes back, service returns only at the next probe.
    session_probe_s: float = 2.0
    session_probe_max_s: float = 4.0
    # SGLang 0.5.23 notices that the client of a non-streaming request went away only when
    # its wait for the engine's output times out, every SGLANG_REQUEST_STATE_WAIT_TIMEOUT
    # (4 s by default; tokenizer_manager's _stream_one_response): until then the abandoned
    # request keeps its queue slot and KV.
    disconnect_poll_s: int = 1

    # SGLang reads these as integers (``EnvInt``); "3.0" would be ignored with a warning and
    # the 300 s default kept, so they are written and accepted as whole seconds only. The
    # inflight watchdog's variable is pdsim's (the patched engine), read the same way.
    INTEGER: ClassVar[tuple[str, ...]] = (
        "bootstrap_s",
        "waiting_s",
        "inflight_s",
        "heartbeat_max_failure",
        "disconnect_poll_s",
    )
    ENV: ClassVar[dict[str, str]] = {
        "bootstrap_s": "SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT",
        "waiting_s": "SGLANG_DISAGGREGATION_WAITING_TIMEOUT",
        "inflight_s": "SGLANG_DISAGGREGATION_PREFILL_INFLIGHT_TIMEOUT",
        "heartbeat_interval_s": "SGLANG_DISAGGREGATION_HEARTBEAT_INTERVAL",
        "heartbeat_max_failure": "SGLANG_DISAGGREGATION_HEARTBEAT_MAX_FAILURE",
        "session_probe_s": "SGLANG_FAILED_SESSION_PROBE_INTERVAL_S",
        "session_probe_max_s": "SGLANG_FAILED_SESSION_PROBE_MAX_INTERVAL_S",
        "disconnect_poll_s": "SGLANG_REQUEST_STATE_WAIT_TIMEOUT",
    }

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> "Timeouts":
        env = dict(os.environ) if env is None else env
        values: dict[str, Any] = {}
        for attr, var in cls.ENV.items():
            raw = env.get(var)
            if raw:
                try:
                    values[attr] = int(raw) if attr in cls.INTEGER else float(raw)
                except ValueError as exc:
                    kind = "a whole number (SGLang parses it with int())" if attr in cls.INTEGER else "a number"
                    raise ConfigError(f"{var}={raw!r} is not {kind}") from exc
        return cls(**values)

    def to_env(self, *, inflight_watchdog: bool = True) -> dict[str, str]:
        """The variables for the engines; the inflight watchdog's only for an engine that has
        one (upstream SGLang reads no such variable)."""
        return {
            var: str(int(getattr(self, attr)) if attr in self.INTEGER else float(getattr(self, attr)))
            for attr, var in self.ENV.items()
            if inflight_watchdog or attr != "inflight_s"
        }

    @property
    def heartbeat_detect_s(self) -> float:
        return heartbeat_detect_s(self.heartbeat_interval_s, self.heartbeat_max_failure)


@dataclass(frozen=True)
class FailureHooks:
    """SGLang 0.5.23's own failure injection (``srt/environ.py``), set in both engines'
    environment at their start. SGLang reads them at every use, so they hold for the engines'
    whole life: a stack with them on is a stack of its own. pdsim reads the same variables.

    ``poll_failure_prob``: the chance that one poll of a room, in any PD queue of either engine
    (prefill's bootstrap, waiting and inflight queues; decode's prealloc and transfer queues),
    reads Failed (``disaggregation/utils.py``, ``_poll_with_failure_injection``). Each room is
    polled at every scheduler step it waits, so the share of requests it fails grows with how
    long they wait. ``kv_checksum_mismatch_prob``: the chance that decode's check of a request's
    KV checksum fails (``decode.py``, ``_verify_kv_checksums``); it needs the KV checksum on."""

    poll_failure_prob: float = 0.0
    kv_checksum_mismatch_prob: float = 0.0

    ENV: ClassVar[dict[str, str]] = {
        "poll_failure_prob": "SGLANG_TEST_DISAGG_FAILURE_PROB",
        "kv_checksum_mismatch_prob": "SGLANG_TEST_DISAGG_KV_CHECKSUM_MISMATCH_PROB",
    }

    def __post_init__(self) -> None:
        for attr in self.ENV:
            if not 0.0 <= getattr(self, attr) <= 1.0:
                raise ConfigError(f"{attr}={getattr(self, attr)!r} is not a probability")

    def __bool__(self) -> bool:
        return any(getattr(self, attr) for attr in self.ENV)

    def to_env(self) -> dict[str, str]:
        """The variables of the hooks that are on (an unset one is SGLang's 0.0)."""
        return {var: str(float(getattr(self, attr))) for attr, var in self.ENV.items() if getattr(self, attr)}


# A heartbeat's GET to prefill's bootstrap server times out after (2, 3) s, connect and read
# (SGLang 0.5.23 ``common/conn.py``, ``heartbeat_checker``; pdsim's too)
HEARTBEAT_READ_S = 3.0


def heartbeat_detect_s(interval_s: float, max_failure: int) -> float:
    """Worst case for decode to declare prefill dead: ``max_failure`` rounds, each a wait of
    the interval (SGLang floors it at 2 s) and a probe that fails no later than its read
    timeout (a frozen prefill's kernel still accepts the connection; a dead one refuses it
    at once). 10 s with the test stacks' 2 s and 2 failures."""
    return max(int(max_failure), 1) * (max(float(interval_s), 2.0) + HEARTBEAT_READ_S)


@dataclass(frozen=True)
class StackConfig:
    """Knobs of the embedded stack; engine speed is chosen so that faults have windows."""

    port_base: int = 21000
    state_dir: Path = Path(".pdchaos")
    timeouts: Timeouts = field(default_factory=Timeouts.from_env)
    defects: str = field(default_factory=lambda: os.environ.get("PDSIM_DEFECTS", ""))
    prefill_ms_per_token: float = 1.0
    decode_ms_per_step: float = 10.0
    kv_bytes_per_token: int = 1024
    # each engine's running batch (SGLang's --max-running-requests; its decode takes twice as
    # many more into transfer before its prealloc queue waits); the same on every target
    max_running_requests: int = 32
    router_request_timeout_s: int = 30
    router_cb_timeout_s: int = 3  # smg's circuit-breaker open time (default 60 s), scaled like the rest
    # consecutive failures that open a worker's circuit (smg's --cb-failure-threshold, its
    # default); a stack whose engines fail requests at random for as long as they run raises it
    # out of reach, as smg's --disable-circuit-breaker does
    router_cb_failure_threshold: int = 10
    # how smg picks a worker of each kind (its --policy; cache_aware is its default): a suite
    # that must know each worker's share of the requests picks round_robin
    router_policy: str = "cache_aware"
    router_max_retries: int = 5  # smg's --retry-max-retries (its default): the retry budget a suite holds it to
    # smg's health checks (default every 60 s): a worker smg marked unhealthy (SGLang answers
    # 503 while it drains after SIGTERM) is routed to again after 2 good checks, so with the
    # default a restarted decode stays unused for up to 2 min; scaled like the rest
    router_health_check_interval_s: int = 2
    # smg's health thresholds and check timeout (its defaults): a worker leaves rotation after
    # this many failed checks in a row, and comes back after this many good ones
    router_health_failure_threshold: int = 3
    router_health_success_threshold: int = 2
    router_health_check_timeout_s: int = 5
    # how often smg polls each worker's load (its --load-monitor-interval, its default), which
    # its overload protection reads: a worker whose queue is at or over
    # router_overload_waiting_requests at a poll is left out of routing until the next one,
    # while another worker is under the mark (suites/test_twin_overload.py polls every 2 s)
    router_load_monitor_interval_s: int = 10
    router_overload_waiting_requests: int = 8  # smg's --worker-overload-waiting-requests (its default)
    # smg's admission control: requests over --max-concurrent-requests wait in a queue of
    # --queue-size for up to --queue-timeout-secs, the rest are shed (smg's defaults: a bound
    # derived from the host, 100, 60 s)
    router_max_concurrent_requests: int = -1
    router_queue_size: int = 100
    router_queue_timeout_s: int = 60
    # decode's radix cache (SGLang's --disaggregation-decode-enable-radix-cache): decode
    # reuses a conversation's earlier KV and asks prefill only for the new tokens' KV
    decode_radix_cache: bool = False
    # the KV checksum (SGLang's --disaggregation-enable-kv-checksum, on both engines): prefill
    # digests each request's KV, decode verifies it and fails the request on a mismatch
    kv_checksum: bool = False
    # decode's KV page size (SGLang's --page-size) where a suite makes it differ from prefill's,
    # which keeps the engines' default (1 token a page on CPU); None: both at the default
    decode_page_size: int | None = None
    # the context length (SGLang's --context-length) of every engine of a kind ("prefill",
    # "decode"), where a suite makes one kind's differ from the other's; empty: each engine's own
    context_length: dict[str, int] = field(default_factory=dict)
    # pdsim prefills' control channel on the stack's fixed port, behind its control proxy; off,
    # on a port the system picks at each start, dialled directly (no control link faults), as
    # real SGLang's ZMQ port always is (suites/test_prefill_new_ports.py)
    fixed_control_port: bool = True
    # how many engines of each kind (chaos.system.topology); the first of each keeps its plain name
    topology: Topology = field(default_factory=Topology)
    # SGLang's test hooks, failing rooms at random from the engines' start (off: all 0)
    hooks: FailureHooks = field(default_factory=FailureHooks)
    startup_timeout_s: float = 30.0
    slack_s: float = 1.5  # how late a watchdog may fire on this 2-core machine
    forward_s: float = 2.0  # longest prefill forward of the suites' prompts
    recovery_s: float = 10.0  # how soon a fresh request must succeed after healing
    restart_s: float = 5.0  # how long the target may take to bring a killed engine back
    # how long a signalled engine may take to reach its new state (gone, frozen, thawed): a
    # process at once; a GPU container holding tens of GB of device memory, tens of seconds
    state_change_s: float = STATE_CHANGE_S
    # the warm-up requests' prompt lengths, in words: one short one, and on engines that compile
    # kernels on first use (GPUs) also the suites' longest, so those compiles happen before
    # the PD timeouts (seconds) meet them; none for a stack whose hooks fail every request
    warm_up_words: tuple[int, ...] = (2,)
    model: str = "pdsim/deterministic-1"  # the served model name clients must send
    # Whether prefill frees rooms pinned in its inflight queue after inflight_s: pdsim models
    # the patched engine of the incident; upstream SGLang has no such watchdog.
    inflight_watchdog: bool = True
    # the GPUs of prefill and decode, on targets with GPUs (chaos.system.gpus hands them out): empty
    # elsewhere, and then compose/gpu.yaml's PREFILL_GPU and DECODE_GPU apply
    gpus: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        wrong = {k: n for k, n in self.context_length.items() if k not in ("prefill", "decode") or n < 1}
        if wrong:
            raise ConfigError(f"context_length takes an engine kind (prefill, decode) and a length >= 1: {wrong}")

    def context_flag(self, kind: str) -> tuple[str, ...]:
        """SGLang's ``--context-length`` for the engines of ``kind``, where the stack sets one."""
        n = self.context_length.get(kind)
        return () if n is None else ("--context-length", str(n))


@dataclass
class StackInfo:
    """The content of stack.json."""

    kind: str
    run_id: str
    port_base: int
    state_dir: str
    endpoints: dict[str, str]
    proxies: dict[str, dict[str, str]]
    services: dict[str, dict[str, Any]]
    config: dict[str, Any]
    created: float = field(default_factory=time.time)

    @classmethod
    def planned(cls, kind: str, cfg: StackConfig, run_id: str, links: tuple[str, ...] = PROXIES) -> "StackInfo":
        """The description of a stack on loopback ports from ``cfg.port_base``, before it starts.
        Every target that runs the stack itself (local processes, Compose) lays it out so;
        ``links`` names the proxies it really puts on the engines' paths. Its engines (pdsim,
        SGLang 0.5.23) serve the live ``/v1/loads`` the sampler reads (``chaos.observe.sampler``)."""
        ports = PortPlan(cfg.port_base)

        def url(port: int) -> str:
            return f"http://{LOOPBACK}:{port}"

        def link(listen: int, upstream: int) -> dict[str, str]:
            return {"listen": f"{LOOPBACK}:{listen}", "upstream": f"{LOOPBACK}:{upstream}"}

        endpoints = {
            "client": url(ports.client_router),
            "router": url(ports.router),
            "router_metrics": f"{url(ports.router_metrics)}/metrics",
            "router_loads": f"{url(ports.router)}/workers",
            "toxiproxy": url(ports.toxiproxy),
            "toxiproxy_metrics": f"{url(ports.toxiproxy)}/metrics",
            "canary": url(ports.canary),  # no service: the rig listens there (chaos.observe.canary)
        }
        proxies = {"client_router": link(ports.client_router, ports.router)}
        for i, name in enumerate(cfg.topology.prefill_names):
            p = ports.prefill_at(i)
            endpoints |= {
                name: url(p.http),
                f"{name}_bootstrap": url(p.bootstrap),
                f"{name}_loads": url(p.http) + LOADS_PATH,
            }
            proxies[link_of("bootstrap", name)] = link(p.bootstrap_proxy, p.bootstrap)
            proxies[link_of("control", name)] = link(p.control_proxy, p.control)
        for i, name in enumerate(cfg.topology.decode_names):
            d = ports.decode_at(i)
            endpoints |= {name: url(d.http), f"{name}_loads": url(d.http) + LOADS_PATH}
            proxies[link_of("kv", name)] = link(d.kv_proxy, d.kv)
        return cls(
            kind=kind,
            run_id=run_id,
            port_base=cfg.port_base,
            state_dir=str(Path(cfg.state_dir).resolve()),
            endpoints=endpoints,
            proxies={name: lnk for name, lnk in proxies.items() if first_of_kind(name) in links},
            services={},
            config={
                "timeouts": cfg.timeouts.__dict__ | {"heartbeat_detect_s": cfg.timeouts.heartbeat_detect_s},
                "defects": [d for d in cfg.defects.split(",") if d],
                "model": cfg.model,
                "topology": cfg.topology.name,
                "router_policy": cfg.router_policy,
                "inflight_watchdog": cfg.inflight_watchdog,
                "gpus": list(cfg.gpus),
                "router_request_timeout_s": cfg.router_request_timeout_s,
                "router_cb_timeout_s": cfg.router_cb_timeout_s,
                "router_cb_failure_threshold": cfg.router_cb_failure_threshold,
                "router_max_retries": cfg.router_max_retries,
                "router_health_check_interval_s": cfg.router_health_check_interval_s,
                "router_health_failure_threshold": cfg.router_health_failure_threshold,
                "router_health_success_threshold": cfg.router_health_success_threshold,
                "router_health_check_timeout_s": cfg.router_health_check_timeout_s,
                "router_load_monitor_interval_s": cfg.router_load_monitor_interval_s,
                "router_overload_waiting_requests": cfg.router_overload_waiting_requests,
                "router_max_concurrent_requests": cfg.router_max_concurrent_requests,
                "router_queue_size": cfg.router_queue_size,
                "router_queue_timeout_s": cfg.router_queue_timeout_s,
                "decode_radix_cache": cfg.decode_radix_cache,
                "kv_checksum": cfg.kv_checksum,
                "decode_page_size": cfg.decode_page_size,
                "context_length": dict(cfg.context_length),
                "fixed_control_port": cfg.fixed_control_port,
                "hooks": asdict(cfg.hooks),
                "prefill_ms_per_token": cfg.prefill_ms_per_token,
                "decode_ms_per_step": cfg.decode_ms_per_step,
                "kv_bytes_per_token": cfg.kv_bytes_per_token,
                "max_running_requests": cfg.max_running_requests,
                "startup_timeout_s": cfg.startup_timeout_s,
                "slack_s": cfg.slack_s,
                "forward_s": cfg.forward_s,
                "recovery_s": cfg.recovery_s,
                "restart_s": cfg.restart_s,
                "state_change_s": cfg.state_change_s,
                "warm_up_words": list(cfg.warm_up_words),
            },
        )

    @property
    def topology(self) -> Topology:
        """How many engines of each kind the stack runs (one of each for a stack file without it)."""
        return Topology.parse(str(self.config.get("topology", "1p1d")))

    @property
    def state_change_s(self) -> float:
        """How long a signalled engine of this stack may take to reach its new state."""
        return float(self.config.get("state_change_s", STATE_CHANGE_S))

    @property
    def path(self) -> Path:
        return Path(self.state_dir) / "stack.json"

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(self), indent=2, sort_keys=True))
        tmp.replace(self.path)

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True)

    @classmethod
    def load(cls, state_dir: Path) -> "StackInfo":
        path = Path(state_dir) / "stack.json"
        try:
            raw = json.loads(path.read_text())
        except FileNotFoundError:
            raise ConfigError(f"no stack at {path} (run `pdchaos up` first)") from None
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{path} is not valid JSON: {exc}") from exc
        try:
            return cls(**raw)
        except TypeError as exc:
            raise ConfigError(f"{path} is not a pd-chaos stack file: {exc}") from exc
