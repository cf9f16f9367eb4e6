"""The embedded stack: real Toxiproxy, two pdsim engines, real smg, as local processes.

    client --[client_router]--> smg --+--> prefill (HTTP)      decode --[bootstrap]--> prefill bootstrap
                                      +--> decode  (HTTP)      decode --[control]---> prefill control
                                                               prefill --[kv]-------> decode kv

A larger topology (``StackConfig.topology``: ``prefill2``, ``decode2``) runs each engine
the same way, behind proxies of its own (``bootstrap2``, ``control2``, ``kv2``); smg is
given every worker.

``up()`` returns once smg's ``/readiness`` is 200 and one real request through
``client_router`` succeeded. Every service runs in its own process group; ``down()``
stops them all, and so does the ``pdchaos down`` of another process via stack.json.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import uuid
from pathlib import Path
from typing import cast

from chaos.errors import ConfigError, TargetError
from chaos.system.ports import ensure_free
from chaos.system.procs import ProcSpec, alive, proc_state, signal_group, spawn, stop_group, stop_groups
from chaos.system.tools import smg_binary, toxiproxy_binary
from chaos.system.topology import Topology, is_engine
from chaos.system.wait import wait_until
from chaos.targets.base import ENGINES, SERVICES, Capability
from chaos.targets.bringup import create_proxies, last_line, wait_ready, warm_up
from chaos.targets.stack import LOOPBACK, PROXIES, PortPlan, StackConfig, StackInfo
from chaos.targets.toxiproxy import ToxiproxyClient

__all__ = ["EmbeddedStack"]


def _url(port: int) -> str:
    return f"http://{LOOPBACK}:{port}"


class EmbeddedStack:
    """The local-process target. Build with ``EmbeddedStack.up(cfg)`` or ``attach(state_dir)``.

    Subclasses run other engines the same way (``sglang_cpu.SGLangCPUStack``): they name
    their kind, the links they proxy and their engines' commands."""

    KIND = "embedded"
    LINKS: tuple[str, ...] = PROXIES
    # one of each engine; a larger topology starts every engine of a kind where its first goes
    START_ORDER: tuple[str, ...] = ("toxiproxy", "prefill", "decode", "router")
    # kv_verified only where the stack's engines check their KV (kv_checksum); no packets to
    # send twice on Toxiproxy's links
    capabilities = frozenset(Capability) - {Capability.KV_VERIFIED, Capability.LINK_DUPLICATE}

    def __init__(self, info: StackInfo) -> None:
        self.info = info
        if info.config.get("kv_checksum"):  # this stack's decode verifies the KV (the session's or a module's choice)
            self.capabilities = self.capabilities | {Capability.KV_VERIFIED}

    # ---- bring up / attach / down ---------------------------------------------------------
    @classmethod
    def up(cls, cfg: StackConfig) -> "EmbeddedStack":
        state_dir = Path(cfg.state_dir).resolve()
        cls._clear_stale(state_dir)
        ports = PortPlan(cfg.port_base)
        ensure_free(ports)
        info = StackInfo.planned(cls.KIND, cfg, uuid.uuid4().hex[:12], links=cls.LINKS)
        stack = cls(info)
        specs = cls._specs(cfg, ports, state_dir)
        try:
            for wave in cls._waves(cfg.topology):
                for name in wave:
                    stack._spawn(specs[name])
                for name in wave:
                    stack._wait_ready(name)
                if "toxiproxy" in wave:
                    create_proxies(info)
            warm_up(info, timeout_s=cfg.startup_timeout_s)
        except BaseException:
            stack.down()
            raise
        return stack

    @classmethod
    def start_order(cls, topology: Topology) -> tuple[str, ...]:
        """``START_ORDER`` with every engine of ``topology`` in its kind's place."""
        return tuple(n for name in cls.START_ORDER for n in (topology.of_kind(name) if name in ENGINES else (name,)))

    @classmethod
    def _waves(cls, topology: Topology) -> list[tuple[str, ...]]:
        """``start_order`` in groups that start side by side: the engines need nothing of
        each other until a request comes (decode meets prefill per request, at its bootstrap
        server), so they start together (a warm SGLang-on-CPU stack: up in 51 s, 60 s one
        engine after the other, on 2 cores); every other service waits for those before it."""
        waves: list[tuple[str, ...]] = []
        for name in cls.start_order(topology):
            if is_engine(name) and waves and is_engine(waves[-1][0]):
                waves[-1] += (name,)
            else:
                waves.append((name,))
        return waves

    @classmethod
    def attach(cls, state_dir: Path) -> "EmbeddedStack":
        info = StackInfo.load(state_dir)
        if info.kind != cls.KIND:
            raise ConfigError(f"{info.path} describes a {info.kind!r} stack, not a {cls.KIND} one")
        return cls(info)

    @staticmethod
    def _clear_stale(state_dir: Path) -> None:
        """A stack.json whose services are all gone is a crashed run's leftover: remove it.
        One with live services belongs to a running stack: refuse to start over it."""
        try:
            old = StackInfo.load(state_dir)
        except ConfigError:
            return
        live = {n: s["pid"] for n, s in old.services.items() if alive(int(s["pid"]))}
        if live:
            raise ConfigError(f"a stack is already up in {state_dir} (pids {live}); run `pdchaos down` first")
        old.path.unlink(missing_ok=True)

    @classmethod
    def _specs(cls, cfg: StackConfig, ports: PortPlan, state_dir: Path) -> dict[str, ProcSpec]:
        logs = state_dir / "logs"
        return {
            "toxiproxy": ProcSpec(
                "toxiproxy",
                (toxiproxy_binary(), "-host", LOOPBACK, "-port", str(ports.toxiproxy), "-proxy-metrics"),
                {},
                logs / "toxiproxy.log",
            ),
            **cls._engine_specs(cfg, ports, logs),
            "router": ProcSpec(
                "router",
                (
                    smg_binary(),
                    "launch",
                    "--host",
                    LOOPBACK,
                    "--port",
                    str(ports.router),
                    "--pd-disaggregation",
                    *cls._workers(cfg.topology, ports),
                    "--policy",
                    cfg.router_policy,
                    "--prometheus-host",
                    LOOPBACK,
                    "--prometheus-port",
                    str(ports.router_metrics),
                    "--request-timeout-secs",
                    str(cfg.router_request_timeout_s),
                    "--cb-timeout-duration-secs",
                    str(cfg.router_cb_timeout_s),
                    "--cb-failure-threshold",
                    str(cfg.router_cb_failure_threshold),
                    "--retry-max-retries",
                    str(cfg.router_max_retries),
                    "--health-check-interval-secs",
                    str(cfg.router_health_check_interval_s),
                    "--health-failure-threshold",
                    str(cfg.router_health_failure_threshold),
                    "--health-success-threshold",
                    str(cfg.router_health_success_threshold),
                    "--health-check-timeout-secs",
                    str(cfg.router_health_check_timeout_s),
                    "--load-monitor-interval",
                    str(cfg.router_load_monitor_interval_s),
                    "--worker-overload-waiting-requests",
                    str(cfg.router_overload_waiting_requests),
                    "--max-concurrent-requests",
                    str(cfg.router_max_concurrent_requests),
                    "--queue-size",
                    str(cfg.router_queue_size),
                    "--queue-timeout-secs",
                    str(cfg.router_queue_timeout_s),
                    "--log-level",
                    "info",
                ),
                {"NO_COLOR": "1"},
                logs / "router.log",
            ),
        }

    @staticmethod
    def _workers(topology: Topology, ports: PortPlan) -> list[str]:
        """smg's worker flags: each prefill with the bootstrap port decode reaches it by (its
        proxy), each decode."""
        flags: list[str] = []
        for i in range(topology.prefills):
            p = ports.prefill_at(i)
            flags += ["--prefill", _url(p.http), str(p.bootstrap_proxy)]
        for i in range(topology.decodes):
            flags += ["--decode", _url(ports.decode_at(i).http)]
        return flags

    @staticmethod
    def _engine_specs(cfg: StackConfig, ports: PortPlan, logs: Path) -> dict[str, ProcSpec]:
        """pdsim prefills and decodes, their control and kv links through Toxiproxy."""
        engine_env = (
            cfg.timeouts.to_env() | cfg.hooks.to_env() | {"PDSIM_DEFECTS": cfg.defects, "PYTHONUNBUFFERED": "1"}
        )
        py = sys.executable
        common = [
            "--prefill-ms-per-token", str(cfg.prefill_ms_per_token),
            "--decode-ms-per-step", str(cfg.decode_ms_per_step),
            "--kv-bytes-per-token", str(cfg.kv_bytes_per_token),
            "--max-running-requests", str(cfg.max_running_requests),
            *(("--disaggregation-enable-kv-checksum",) if cfg.kv_checksum else ()),
        ]  # fmt: skip
        specs: dict[str, ProcSpec] = {}
        for i, name in enumerate(cfg.topology.prefill_names):
            p = ports.prefill_at(i)
            argv = (
                py, "-m", "pdsim", "--mode", "prefill",
                "--port", str(p.http),
                "--disaggregation-bootstrap-port", str(p.bootstrap),
                *(
                    ("--control-port", str(p.control), "--control-advertise", f"{LOOPBACK}:{p.control_proxy}")
                    if cfg.fixed_control_port
                    else ("--control-port", "0")
                ),
                *common,
                *cfg.context_flag("prefill"),
            )  # fmt: skip
            specs[name] = ProcSpec(name, argv, engine_env, logs / f"{name}.log")
        for i, name in enumerate(cfg.topology.decode_names):
            d = ports.decode_at(i)
            argv = (
                py, "-m", "pdsim", "--mode", "decode",
                "--port", str(d.http),
                "--kv-port", str(d.kv),
                "--kv-advertise", f"{LOOPBACK}:{d.kv_proxy}",
                *common,
                *(("--disaggregation-decode-enable-radix-cache",) if cfg.decode_radix_cache else ()),
                *(("--page-size", str(cfg.decode_page_size)) if cfg.decode_page_size else ()),
                *cfg.context_flag("decode"),
            )  # fmt: skip
            specs[name] = ProcSpec(name, argv, engine_env, logs / f"{name}.log")
        return specs

    def _launch(self, spec: ProcSpec) -> None:
        self._spawn(spec)
        self._wait_ready(spec.name)

    def _spawn(self, spec: ProcSpec) -> None:
        pid = spawn(self._placed(spec))
        self.info.services[spec.name] = {"pid": pid, **spec.to_json()}
        self.info.save()

    def _wait_ready(self, service: str) -> None:
        pid = self.pid(service)
        wait_ready(
            self.info,
            service,
            alive=lambda: alive(pid),
            why_dead=lambda: f"{last_line(self.logs(service))} (log: {self.log_path(service)})",
            timeout_s=float(self.info.config["startup_timeout_s"]),
        )

    def _placed(self, spec: ProcSpec) -> ProcSpec:
        """The spec as it is started; a subclass may put it somewhere (a namespace) that the
        stored spec does not name, since where that is can change with each start."""
        return spec

    def toxiproxy(self) -> ToxiproxyClient:
        return ToxiproxyClient(self.info.endpoints["toxiproxy"])

    def down(self) -> None:
        """Stop every service at once and remove stack.json (once what a run judges is
        recorded, the order services go in decides nothing)."""
        pids = [int(rec["pid"]) for rec in self.info.services.values()]
        try:
            stop_groups(pids, grace_s=1.0)  # smg would linger 5 s to drain
        finally:
            with contextlib.suppress(FileNotFoundError):
                self.info.path.unlink()

    # ---- the Target interface ---------------------------------------------------------------
    def _check(self, service: str) -> dict[str, object]:
        order = self.start_order(self.info.topology)
        if service not in SERVICES and service not in order:
            raise ConfigError(f"unknown service {service!r}; known: {', '.join(order)}")
        rec = self.info.services.get(service)
        if rec is None:
            raise TargetError(f"{service} was never started in this stack")
        return rec

    def pid(self, service: str) -> int:
        return cast(int, self._check(service)["pid"])

    def spec(self, service: str) -> ProcSpec:
        return ProcSpec.from_json(service, self._check(service))

    def log_path(self, service: str) -> Path:
        return self.spec(service).log

    def is_running(self, service: str) -> bool:
        return alive(self.pid(service))

    def main_pid(self, service: str) -> int | None:
        return self.pid(service) if self.is_running(service) else None

    def is_frozen(self, service: str) -> bool:
        return proc_state(self.pid(service)) == "T"

    def start(self, service: str) -> None:
        if self.is_running(service):
            raise TargetError(f"{service} is already running (pid {self.pid(service)})")
        self._launch(self.spec(service))
        if service == "toxiproxy":
            create_proxies(self.info)

    def stop(self, service: str) -> None:
        stop_group(self.pid(service))

    def kill(self, service: str) -> None:
        pid = self.pid(service)
        if not signal_group(pid, signal.SIGKILL):
            raise TargetError(f"{service} (pid {pid}) was not running")
        wait_until(
            lambda: not alive(pid), timeout_s=self.info.state_change_s, what=f"{service} (pid {pid}) gone after SIGKILL"
        )

    def terminate(self, service: str) -> None:
        pid = self.pid(service)
        try:
            os.kill(pid, signal.SIGTERM)  # the main process only: its children are its to stop
        except ProcessLookupError as exc:
            raise TargetError(f"{service} (pid {pid}) was not running") from exc

    def freeze(self, service: str) -> None:
        pid = self.pid(service)
        if not signal_group(pid, signal.SIGSTOP):
            raise TargetError(f"{service} (pid {pid}) was not running")
        wait_until(
            lambda: self.is_frozen(service),
            timeout_s=self.info.state_change_s,
            what=f"{service} (pid {pid}) in state T",
        )

    def thaw(self, service: str) -> None:
        pid = self.pid(service)
        signal_group(pid, signal.SIGCONT)
        wait_until(
            lambda: not self.is_frozen(service),
            timeout_s=self.info.state_change_s,
            what=f"{service} (pid {pid}) out of state T",
        )

    def restart(self, service: str) -> None:
        """Stop (or find dead) the service, start it with the same command, wait until ready."""
        if self.is_running(service):
            self.stop(service)
        self.start(service)

    def logs(self, service: str) -> str:
        try:
            return self.log_path(service).read_text(errors="replace")
        except FileNotFoundError:
            return ""
