"""The attach target: a deployment pd-chaos did not start, described by a stack file.

Each service's kill, start, restart, freeze, thaw and log commands are shell commands from
the file (``systemctl kill -s KILL sglang-decode``, the same over ssh, a script of yours),
run with ``bash -c`` and a timeout. Destructive actions (anything that kills, stops,
freezes or restarts) refuse to run unless the user opted in with ``--allow-destructive``:
this stack may be serving someone. ``down()`` leaves the deployment alone.
"""

from __future__ import annotations

import subprocess
import uuid
from pathlib import Path

from chaos.errors import ConfigError, TargetError
from chaos.faults.commanded import CommandedLinkFault
from chaos.system.procs import run
from chaos.system.wait import wait_until
from chaos.targets.base import SERVICES, Capability
from chaos.targets.bringup import wait_ready
from chaos.targets.stack import StackInfo, heartbeat_detect_s
from chaos.targets.stackfile import load_stack_file

__all__ = ["DESTRUCTIVE_HINT", "AttachedStack"]

DESTRUCTIVE_HINT = (
    "pass --allow-destructive to let pd-chaos kill, freeze and restart services of a stack it did not start"
)
# SGLang's and smg's own defaults: what a deployment runs with unless its stack file says otherwise.
_DEFAULT_TIMEOUTS = {
    "bootstrap_s": 300.0,
    "waiting_s": 300.0,
    "inflight_s": 300.0,
    "heartbeat_interval_s": 5.0,
    "heartbeat_max_failure": 2,
    "disconnect_poll_s": 4.0,
}
_DEFAULT_ROUTER = {"request_timeout_s": 1800.0, "cb_timeout_s": 60.0, "max_retries": 5}
_DEFAULT_BOUNDS = {
    "slack_s": 1.5,
    "forward_s": 2.0,
    "recovery_s": 10.0,
    "restart_s": 120.0,
    "startup_timeout_s": 120.0,
    "command_timeout_s": 30.0,
}
_PROCESS_COMMANDS = ("running", "frozen", "kill", "start", "restart", "freeze", "thaw")
_LINK_CAPABILITY = {
    "client_router": Capability.PROXIED_CLIENT,
    "bootstrap": Capability.PROXIED_BOOTSTRAP,
    "control": Capability.CONTROL_LINK,
    "kv": Capability.KV_LINK,
}


class AttachedStack:
    """A foreign deployment driven through its stack file's commands."""

    def __init__(
        self,
        info: StackInfo,
        commands: dict[str, dict[str, str]],
        *,
        allow_destructive: bool,
        links: dict[str, dict[str, str]] | None = None,
    ) -> None:
        self.info = info
        self.commands = commands
        self.links = links or {}
        self.packet_links = tuple(self.links)  # broken by the file's commands (chaos.faults.menu)
        self.allow_destructive = allow_destructive
        caps = {cap for link, cap in _LINK_CAPABILITY.items() if link in info.proxies}
        if caps & {Capability.KV_LINK, Capability.CONTROL_LINK}:
            caps.add(Capability.LINK_DELAY)  # Toxiproxy's latency toxic on the engine links it proxies
        caps |= {_LINK_CAPABILITY[link] for link in self.links}
        if "crawl" in self.links.get("kv", {}):
            caps.add(Capability.TRANSFER_WINDOW)  # a crawl of the kv link holds a real engine's transfer open
        if info.config.get("inflight_watchdog"):
            caps.add(Capability.INFLIGHT_WATCHDOG)
        if "decode_loads" in info.endpoints:  # SGLang's /v1/loads (0.5.23): see chaos.observe.sampler
            caps.add(Capability.LIVE_QUEUE_GAUGES)
        if self._can_act() and allow_destructive:
            caps.add(Capability.PROCESS_CONTROL)
        self.capabilities = frozenset(caps)

    @classmethod
    def from_file(
        cls, path: Path, *, allow_destructive: bool = False, state_dir: Path = Path(".pdchaos")
    ) -> "AttachedStack":
        raw = load_stack_file(path)
        timeouts = _DEFAULT_TIMEOUTS | raw.get("timeouts", {})
        detect_s = heartbeat_detect_s(timeouts["heartbeat_interval_s"], timeouts["heartbeat_max_failure"])
        router = _DEFAULT_ROUTER | raw.get("router", {})
        bounds = _DEFAULT_BOUNDS | raw.get("bounds", {})
        endpoints = dict(raw["endpoints"])
        if "toxiproxy" in endpoints:
            endpoints.setdefault("toxiproxy_metrics", endpoints["toxiproxy"] + "/metrics")
        info = StackInfo(
            kind="attach",
            run_id=uuid.uuid4().hex[:12],
            port_base=0,
            state_dir=str(Path(state_dir).resolve()),
            endpoints=endpoints,
            proxies=raw.get("proxies", {}),
            services={},
            config={
                "name": raw.get("name", Path(path).stem),
                "stack_file": str(Path(path).resolve()),
                "timeouts": timeouts | {"heartbeat_detect_s": detect_s},
                "defects": [],
                # only a patched engine has one; its stack file says so by giving its timeout
                "inflight_watchdog": "inflight_s" in raw.get("timeouts", {}),
                "router_request_timeout_s": router["request_timeout_s"],
                "router_cb_timeout_s": router["cb_timeout_s"],
                "router_max_retries": router["max_retries"],
                **bounds,
            },
        )
        return cls(info, raw.get("services", {}), allow_destructive=allow_destructive, links=raw.get("links", {}))

    def _can_act(self) -> bool:
        """Whether the file gives every process command for prefill, decode and router."""
        return all(
            all(c in self.commands.get(s, {}) for c in _PROCESS_COMMANDS) for s in ("prefill", "decode", "router")
        )

    def missing_reason(self, cap: Capability) -> str:
        """Why this stack lacks a capability, for the skip message."""
        if cap is Capability.PROCESS_CONTROL:
            if not self._can_act():
                return f"the stack file gives no {'/'.join(_PROCESS_COMMANDS)} commands for prefill, decode and router"
            return DESTRUCTIVE_HINT
        if cap in _LINK_CAPABILITY.values():
            link = next(k for k, v in _LINK_CAPABILITY.items() if v is cap)
            return f"the stack file lists no Toxiproxy proxy and no links.{link} commands for the {link} link"
        if cap is Capability.LINK_DELAY:
            return "the stack file lists no Toxiproxy proxy on an engine link (kv, control) to delay"
        if cap is Capability.LIVE_QUEUE_GAUGES:
            return "the stack file lists no prefill_loads/decode_loads (SGLang's /v1/loads): its /metrics sets decode's queue gauges only when decode logs a batch"
        if cap is Capability.TRANSFER_WINDOW:
            return "a real engine's KV transfer is too short to trigger inside, and the stack file gives no links.kv.crawl to slow it"
        if cap is Capability.INFLIGHT_WATCHDOG:
            return "the stack file sets no timeouts.inflight_s (upstream SGLang has no prefill inflight watchdog)"
        return "an attached deployment runs real engines, not pdsim"

    def down(self) -> None:
        """Nothing to stop: pd-chaos did not start this deployment."""

    # ---- running the file's commands --------------------------------------------------------
    def _command(self, service: str, action: str) -> str:
        if service not in SERVICES:
            raise ConfigError(f"unknown service {service!r}; known: {', '.join(SERVICES)}")
        cmd = self.commands.get(service, {}).get(action)
        if not cmd:
            raise TargetError(f"the stack file gives no `{action}` command for {service} (services.{service}.{action})")
        return cmd

    def _run(self, service: str, action: str) -> subprocess.CompletedProcess[str]:
        cmd = self._command(service, action)
        return self._shell(cmd, f"services.{service}.{action} (`{cmd}`)")

    def _shell(self, cmd: str, what: str) -> subprocess.CompletedProcess[str]:
        return run(["bash", "-c", cmd], timeout_s=float(self.info.config["command_timeout_s"]), what=what)

    def link_fault(self, link: str, *, mode: str = "", rate_kbit: int | None = None) -> CommandedLinkFault:
        """A fault on an engine link by the file's ``links.<link>`` commands."""
        return CommandedLinkFault(link, self.links.get(link, {}), self._shell, mode=mode, rate_kbit=rate_kbit)

    def _act(self, service: str, action: str) -> None:
        if not self.allow_destructive:
            raise TargetError(f"refusing to {action} {service} of an attached stack: {DESTRUCTIVE_HINT}")
        out = self._run(service, action)
        if out.returncode != 0:
            tail = " | ".join((out.stderr or out.stdout).strip().splitlines()[-3:])
            raise TargetError(
                f"services.{service}.{action} (`{self._command(service, action)}`) exited {out.returncode}: {tail}"
            )

    def _holds(self, service: str, question: str) -> bool:
        return self._run(service, question).returncode == 0

    # ---- the Target interface ---------------------------------------------------------------
    def is_running(self, service: str) -> bool:
        return self._holds(service, "running")

    def main_pid(self, service: str) -> int | None:
        return None  # a deployment's processes may be on any host: a soak reads none

    def is_frozen(self, service: str) -> bool:
        return self._holds(service, "frozen")

    def _settle(self, service: str, holds: bool, what: str) -> None:
        wait_until(
            lambda: self.is_running(service) == holds,
            timeout_s=float(self.info.config["command_timeout_s"]),
            what=f"{service} {what}",
        )

    def _wait_ready(self, service: str) -> None:
        wait_ready(
            self.info,
            service,
            alive=lambda: self.is_running(service),
            why_dead=lambda: "its `running` command says it is not running",
            timeout_s=float(self.info.config["startup_timeout_s"]),
        )

    def start(self, service: str) -> None:
        self._act(service, "start")
        self._wait_ready(service)

    def stop(self, service: str) -> None:
        self._act(service, "stop")
        self._settle(service, False, "stopped")

    def kill(self, service: str) -> None:
        self._act(service, "kill")
        self._settle(service, False, "gone after kill")

    def terminate(self, service: str) -> None:
        self._act(service, "terminate")

    def freeze(self, service: str) -> None:
        self._act(service, "freeze")
        wait_until(
            lambda: self.is_frozen(service),
            timeout_s=float(self.info.config["command_timeout_s"]),
            what=f"{service} frozen",
        )

    def thaw(self, service: str) -> None:
        self._act(service, "thaw")
        wait_until(
            lambda: not self.is_frozen(service),
            timeout_s=float(self.info.config["command_timeout_s"]),
            what=f"{service} thawed",
        )

    def restart(self, service: str) -> None:
        self._act(service, "restart")
        self._wait_ready(service)

    def logs(self, service: str) -> str:
        """The service's log as its `logs` command prints it ("" when the file gives none)."""
        if "logs" not in self.commands.get(service, {}):
            return ""
        return self._run(service, "logs").stdout
