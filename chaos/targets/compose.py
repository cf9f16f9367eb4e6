"""The Compose targets: the same stack as containers, from ``compose/stack.yaml`` plus an
engine overlay (``cpu.yaml``: pdsim; ``sglang-cpu.yaml``: real SGLang on CPU, the
sglang-cpu target's engines in containers; ``gpu.yaml``: real SGLang on GPUs).

Compose v2 brings the stack up (``up -d --wait``: every healthcheck passes) and down; the
docker SDK kills (SIGKILL), freezes (the cgroup freezer: ``docker pause``), thaws, restarts
and reads the logs of single containers, found by their Compose labels. Every container uses
host networking, so the ports, the proxies and every endpoint are those of the embedded
stack on the same ``--port-base``, and the suites cannot tell the two apart.
"""

from __future__ import annotations

import contextlib
import json
import os
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, NamedTuple

from tenacity import retry, retry_if_exception, stop_after_delay, wait_fixed

from chaos.errors import ConfigError, FaultNotApplied, TargetError
from chaos.faults.packet import PacketLink
from chaos.system.netns import Namespace
from chaos.system.ports import ensure_free
from chaos.system.procs import run
from chaos.system.shm import remove_orphans
from chaos.system.tools import REPO_ROOT
from chaos.system.wait import STATE_CHANGE_S, wait_until
from chaos.targets.base import REAL_SGLANG, REAL_SGLANG_LINKS, SERVICES, START_FAILURE, Capability
from chaos.targets.bringup import create_proxies, last_line, wait_ready, warm_up
from chaos.targets.docker_logs import ContainerLog
from chaos.targets.sglang_cpu import LAUNCHER, PACKET_CAPABILITIES, PACKET_LINKS, SGLANG_HOME, sglang_packet_link
from chaos.targets.stack import PROXIES, PortPlan, StackConfig, StackInfo

__all__ = ["VARIANTS", "ComposeStack", "compose_env", "rendered"]

COMPOSE_DIR = REPO_ROOT / "compose"


class Variant(NamedTuple):
    """An engine overlay of compose/stack.yaml (its files, in order): what it can do, the
    links it proxies, those it breaks with packet rules in the engines' namespace (its
    ``netns`` container's), whether its engines share the host's IPC namespace (and so
    its ``/dev/shm``, where a killed engine's files outlive the container), and whether its
    overlay passes the KV checksum flag and the failure hooks' variables (``ENGINE_KV_CHECKSUM``,
    ``SGLANG_TEST_DISAGG_*``)."""

    overlays: tuple[str, ...]
    capabilities: frozenset[Capability]
    links: tuple[str, ...] = PROXIES
    packet_links: tuple[str, ...] = ()
    host_ipc: bool = False
    engine_options: bool = False


VARIANTS: dict[str, Variant] = {
    "compose": Variant(
        ("cpu.yaml",),
        # its prefill's control port is the overlay's, fixed: a restart keeps it
        frozenset(Capability) - {Capability.KV_VERIFIED, Capability.LINK_DUPLICATE, Capability.FRESH_RANK_PORTS},
        engine_options=True,
    ),
    "compose-sglang-cpu": Variant(
        ("sglang-cpu.yaml",), REAL_SGLANG | PACKET_CAPABILITIES, REAL_SGLANG_LINKS, PACKET_LINKS, engine_options=True
    ),
    # image pinned to 0.5.23, as sglang-cpu; the engines on the host's network, so KV and
    # control messages cross no proxy and no namespace of ours: no kv or control link faults
    "compose-gpu": Variant(("gpu.yaml", "gpu-tcp.yaml"), REAL_SGLANG, REAL_SGLANG_LINKS, host_ipc=True),
    "compose-gpu-rdma": Variant(("gpu.yaml", "gpu-rdma.yaml"), REAL_SGLANG, REAL_SGLANG_LINKS, host_ipc=True),
}
_CLI_TIMEOUT_S = 60.0
LAST_LINES = 20
_STOP_GRACE_S = 2


def _docker() -> Any:
    import docker  # the SDK; imported here so the embedded target never needs it

    try:
        client = docker.from_env(timeout=10)
        client.ping()
    except Exception as exc:  # docker.errors.DockerException and connection errors
        raise ConfigError(f"no Docker engine reachable ({exc}); run scripts/docker-setup.sh") from exc
    return client


def rendered(
    variant: str, env: dict[str, str], project: str = "pdchaos-render", compose_dir: Path = COMPOSE_DIR
) -> dict[str, Any]:
    """The merged Compose model of ``variant`` for these variables (`docker compose config`),
    as `up` would run it: what the gpu-on-cpu target starts, and what the tests read."""
    argv = ["docker", "compose", "-p", project]
    for f in ("stack.yaml", *VARIANTS[variant].overlays):
        argv += ["-f", str(compose_dir / f)]
    try:
        out = run([*argv, "config", "--format", "json"], timeout_s=_CLI_TIMEOUT_S, env=os.environ | env)
    except FileNotFoundError as exc:
        raise ConfigError("the docker CLI is not installed; run scripts/docker-setup.sh") from exc
    if out.returncode != 0:
        raise ConfigError(f"`docker compose config` of {variant} failed: {out.stderr.strip()[-500:]}")
    return dict(json.loads(out.stdout))


def compose_env(cfg: StackConfig) -> dict[str, str]:
    """The variables compose/stack.yaml and its overlays read, from the stack's configuration."""
    return {
        **PortPlan(cfg.port_base).as_env(),
        **cfg.timeouts.to_env(),
        "PDSIM_DEFECTS": cfg.defects,
        "PDSIM_PREFILL_MS_PER_TOKEN": str(cfg.prefill_ms_per_token),
        "PDSIM_DECODE_MS_PER_STEP": str(cfg.decode_ms_per_step),
        "PDSIM_KV_BYTES_PER_TOKEN": str(cfg.kv_bytes_per_token),
        "ENGINE_MAX_RUNNING_REQUESTS": str(cfg.max_running_requests),
        "ENGINE_DECODE_RADIX_CACHE": "--disaggregation-decode-enable-radix-cache"
        if cfg.decode_radix_cache
        else "",  # empty: the overlay's default
        "ENGINE_KV_CHECKSUM": "--disaggregation-enable-kv-checksum" if cfg.kv_checksum else "",
        "ENGINE_DECODE_PAGE_SIZE": f"--page-size={cfg.decode_page_size}" if cfg.decode_page_size else "",
        **{f"ENGINE_{kind.upper()}_CONTEXT_LENGTH": "=".join(cfg.context_flag(kind)) for kind in ("prefill", "decode")},
        **cfg.hooks.to_env(),
        "SMG_REQUEST_TIMEOUT_SECS": str(cfg.router_request_timeout_s),
        "SMG_CB_TIMEOUT_SECS": str(cfg.router_cb_timeout_s),
        "SMG_CB_FAILURE_THRESHOLD": str(cfg.router_cb_failure_threshold),
        "SMG_RETRY_MAX_RETRIES": str(cfg.router_max_retries),
        "SMG_HEALTH_CHECK_INTERVAL_SECS": str(cfg.router_health_check_interval_s),
        "SMG_HEALTH_FAILURE_THRESHOLD": str(cfg.router_health_failure_threshold),
        "SMG_HEALTH_SUCCESS_THRESHOLD": str(cfg.router_health_success_threshold),
        "SMG_HEALTH_CHECK_TIMEOUT_SECS": str(cfg.router_health_check_timeout_s),
        "SMG_POLICY": cfg.router_policy,
        "SMG_LOAD_MONITOR_INTERVAL": str(cfg.router_load_monitor_interval_s),
        "SMG_OVERLOAD_WAITING_REQUESTS": str(cfg.router_overload_waiting_requests),
        "SMG_MAX_CONCURRENT_REQUESTS": str(cfg.router_max_concurrent_requests),
        "SMG_QUEUE_SIZE": str(cfg.router_queue_size),
        "SMG_QUEUE_TIMEOUT_SECS": str(cfg.router_queue_timeout_s),
        # sglang-cpu.yaml mounts the host's SGLang venv and model, and the engines' launcher with the sgl_kernel shim
        "PDCHAOS_SGLANG_HOME": str(SGLANG_HOME),
        "PDCHAOS_SGLANG_CPU": str(LAUNCHER.parent),
        "PDCHAOS_BRIDGE": str(
            REPO_ROOT / "chaos" / "system" / "bridge.py"
        ),  # the engines' namespace's process (sglang-cpu.yaml)
        "PDCHAOS_HOST_NETNS": f"/proc/{os.getpid()}/ns/net",  # the host's side of that bridge: this process's namespace
        **(
            {"PREFILL_GPU": cfg.gpus[0], "DECODE_GPU": cfg.gpus[1]} if cfg.gpus else {}
        ),  # gpu.yaml's devices, from the run's pool
    }


def _freezer_busy(exc: BaseException) -> bool:
    return "unable to freeze" in str(exc)


@retry(
    retry=retry_if_exception(_freezer_busy), stop=stop_after_delay(STATE_CHANGE_S), wait=wait_fixed(0.2), reraise=True
)
def _pause(container: Any) -> None:
    """``docker pause``, again while runc reports "unable to freeze": on a loaded machine the
    cgroup freezer can miss its own retry budget, and runc thaws and leaves retrying to its
    caller (opencontainers/runc#4388; CI saw it once beside real SGLang)."""
    container.pause()


class ComposeStack:
    """A Compose project ``pdchaos-<port base>``; build with ``up(cfg, variant)`` or ``attach``."""

    def __init__(self, info: StackInfo) -> None:
        self.info = info
        self.capabilities = VARIANTS[info.kind].capabilities
        if info.config.get("kv_checksum"):  # this stack's decode verifies the KV
            self.capabilities = self.capabilities | {Capability.KV_VERIFIED}
        self.packet_links = VARIANTS[info.kind].packet_links
        self._client: Any = None
        self._logs: dict[str, ContainerLog] = {}

    # ---- bring up / attach / down ---------------------------------------------------------
    @classmethod
    def up(cls, cfg: StackConfig, variant: str = "compose") -> "ComposeStack":
        if variant not in VARIANTS:
            raise ConfigError(f"unknown compose variant {variant!r}; known: {', '.join(VARIANTS)}")
        wants = cfg.kv_checksum or cfg.hooks or cfg.decode_page_size or cfg.context_length
        if wants and not VARIANTS[variant].engine_options:
            raise ConfigError(
                f"{variant} does not set the KV checksum, SGLang's failure hooks, decode's page size or a context length: "
                f"{', '.join(name for name, v in VARIANTS.items() if v.engine_options)} do"
            )
        info = StackInfo.planned(variant, cfg, uuid.uuid4().hex[:12], links=VARIANTS[variant].links)
        project = f"pdchaos-{cfg.port_base}"
        files = [str(COMPOSE_DIR / f) for f in ("stack.yaml", *VARIANTS[variant].overlays)]
        info.config["compose"] = {"project": project, "files": files, "env": compose_env(cfg)}
        stack = cls(info)
        stack._client = _docker()
        ensure_free(PortPlan(cfg.port_base))  # a live stack on these ports: refuse, never replace it
        stack._compose("down", "-t", "0", "--remove-orphans")  # a crashed run's stopped containers
        info.save()
        try:
            stack._compose(
                "up",
                "-d",
                "--wait",
                "--wait-timeout",
                str(int(cfg.startup_timeout_s)),
                timeout_s=cfg.startup_timeout_s + 30,
            )
            create_proxies(info)  # a clean slate whatever the config file made
            warm_up(info, timeout_s=cfg.startup_timeout_s)
            info.config["compose"]["images"] = stack._images()
            info.save()
        except BaseException as exc:
            if isinstance(exc, Exception):  # not on Ctrl-C: then only the teardown matters
                with contextlib.suppress(Exception):
                    stack.keep_start_failure(cfg.state_dir / START_FAILURE, exc)
            with contextlib.suppress(Exception):
                stack.down()
            raise
        return stack

    def keep_start_failure(self, folder: Path, exc: BaseException) -> None:
        """What a first night needs when the stack does not start, written before the
        containers are removed: each container's whole log (``<service>.log``) and its state
        (status, exit code, OOM kill, health) in ``failure.json``, with its last lines."""
        folder.mkdir(parents=True, exist_ok=True)
        services = {}
        for service in (*SERVICES, "netns"):
            try:
                c = self._container(service)
            except TargetError:
                continue
            log = self.logs(service)
            (folder / f"{service}.log").write_text(log)
            state = c.attrs["State"]
            services[service] = {
                "status": state.get("Status"),
                "exit_code": state.get("ExitCode"),
                "oom_killed": state.get("OOMKilled"),
                "error": state.get("Error") or "",
                "health": (state.get("Health") or {}).get("Status"),
                "last_lines": log.splitlines()[-LAST_LINES:],
            }
        failure = {"kind": self.info.kind, "port_base": self.info.port_base, "error": str(exc), "services": services}
        (folder / "failure.json").write_text(json.dumps(failure, indent=2))

    @classmethod
    def attach(cls, state_dir: Path) -> "ComposeStack":
        info = StackInfo.load(state_dir)
        if info.kind not in VARIANTS:
            raise ConfigError(f"{info.path} describes a {info.kind!r} stack, not a compose one")
        return cls(info)

    def _images(self) -> dict[str, dict[str, Any]]:
        """What each service runs: the reference Compose resolved, the local image id, and the
        registry digests that pin it (``image@sha256:…``), for the run's report; a locally
        built image has no digest."""
        found = {}
        for service in (*SERVICES, "netns"):
            with contextlib.suppress(TargetError):
                c = self._container(service)
                found[service] = {
                    "ref": c.attrs["Config"]["Image"],
                    "id": c.image.id,
                    "digests": list(c.image.attrs.get("RepoDigests") or []),
                }
        return found

    @property
    def project(self) -> str:
        return str(self.info.config["compose"]["project"])

    def _compose(self, *args: str, timeout_s: float = _CLI_TIMEOUT_S) -> str:
        rec = self.info.config["compose"]
        argv = ["docker", "compose", "-p", self.project]
        for f in rec["files"]:
            argv += ["-f", f]
        try:
            out = run(
                [*argv, *args],
                timeout_s=timeout_s,
                what=f"`docker compose {' '.join(args)}`",
                env=os.environ | rec["env"],
            )
        except FileNotFoundError as exc:
            raise ConfigError("the docker CLI is not installed; run scripts/docker-setup.sh") from exc
        if out.returncode != 0:
            tail = " | ".join(out.stderr.strip().splitlines()[-3:])
            raise TargetError(f"`docker compose {' '.join(args)}` failed ({out.returncode}): {tail}")
        return out.stdout

    def down(self) -> None:
        """Remove the project's containers (and nothing else: host networking makes no
        network), and the files its engines left in the host's ``/dev/shm``, if they used it."""
        # a GPU engine's container goes only once its device memory is back: its state-change time
        self._compose(
            "down",
            "-t",
            str(_STOP_GRACE_S),
            "--remove-orphans",
            timeout_s=max(_CLI_TIMEOUT_S, 2 * self.info.state_change_s),
        )
        if VARIANTS[self.info.kind].host_ipc:
            remove_orphans(since=self.info.created - 1.0)
        with contextlib.suppress(FileNotFoundError):
            self.info.path.unlink()
        if self._client is not None:
            self._client.close()

    def config(self) -> str:
        """The merged, interpolated Compose file, as Compose reads it."""
        return self._compose("config")

    # ---- the Target interface ---------------------------------------------------------------
    def _container(self, service: str) -> Any:
        if service not in SERVICES and service != "netns":
            raise ConfigError(f"unknown service {service!r}; known: {', '.join(SERVICES)}")
        if self._client is None:
            self._client = _docker()
        labels = [f"com.docker.compose.project={self.project}", f"com.docker.compose.service={service}"]
        found = self._client.containers.list(all=True, filters={"label": labels})
        if not found:
            raise TargetError(f"no container for {service} in compose project {self.project}")
        return found[0]

    def _status(self, service: str) -> str:
        return str(self._container(service).status)

    def is_running(self, service: str) -> bool:
        return self._status(service) in ("running", "paused", "restarting")

    def is_frozen(self, service: str) -> bool:
        return self._status(service) == "paused"

    def _wait_ready(self, service: str) -> None:
        wait_ready(
            self.info,
            service,
            alive=lambda: self.is_running(service),
            why_dead=lambda: last_line(self.logs(service)),
            timeout_s=float(self.info.config["startup_timeout_s"]),
        )
        if service == "toxiproxy":
            create_proxies(self.info)

    def main_pid(self, service: str) -> int | None:
        c = self._container(service)
        return int(c.attrs["State"]["Pid"]) or None  # 0 when it is not running; the host's PID namespace

    def start(self, service: str) -> None:
        if self.is_running(service):
            raise TargetError(f"{service} is already running")
        self._container(service).start()
        self._wait_ready(service)

    def stop(self, service: str) -> None:
        self._container(service).stop(timeout=_STOP_GRACE_S)

    def kill(self, service: str) -> None:
        c = self._container(service)
        if c.status != "running":
            raise TargetError(f"{service} was not running ({c.status})")
        c.kill()  # SIGKILL to the container's init: everything in it dies
        wait_until(
            lambda: not self.is_running(service),
            timeout_s=self.info.state_change_s,
            what=f"{service} container exited after SIGKILL",
        )

    def terminate(self, service: str) -> None:
        c = self._container(service)
        if c.status != "running":
            raise TargetError(f"{service} was not running ({c.status})")
        c.kill(signal="SIGTERM")  # to the container's main process, as `docker stop` begins

    def freeze(self, service: str) -> None:
        c = self._container(service)
        if c.status != "running":
            raise TargetError(f"{service} was not running ({c.status})")
        _pause(c)
        wait_until(
            lambda: self.is_frozen(service), timeout_s=self.info.state_change_s, what=f"{service} container paused"
        )

    def thaw(self, service: str) -> None:
        self._container(service).unpause()
        wait_until(
            lambda: not self.is_frozen(service),
            timeout_s=self.info.state_change_s,
            what=f"{service} container unpaused",
        )

    def restart(self, service: str) -> None:
        """Stop (or find dead) the container, start it again, wait until ready."""
        self._container(service).restart(timeout=_STOP_GRACE_S)
        self._wait_ready(service)

    def logs(self, service: str) -> str:
        """The container's whole log, of which only what is new crosses the Docker API."""
        c = self._container(service)
        kept = self._logs.get(service)
        if kept is None or kept.container_id != c.id:  # a new container (`up` recreates them): a new log
            kept = self._logs[service] = ContainerLog(c.id)
        return kept.read(c)

    def _logs_since_start(self, service: str) -> str:
        """The container's log since its latest start (a restart keeps the container, and its log)."""
        c = self._container(service)
        started = datetime.fromisoformat(c.attrs["State"]["StartedAt"][:19]).replace(tzinfo=timezone.utc)
        return bytes(c.logs(stdout=True, stderr=True, since=int(started.timestamp()))).decode(errors="replace")

    def packet_link(self, link: str) -> PacketLink:
        """Where ``kv`` or ``control`` goes now, in the ``netns`` container's namespace,
        entered from the host (no tool in any image)."""
        pid = self.main_pid("netns")
        if pid is None:
            raise FaultNotApplied("the engines' namespace container (netns) is not running")
        return sglang_packet_link(
            link,
            Namespace(pid),
            lambda: self._logs_since_start("decode"),
            self.info.endpoints["prefill_bootstrap"],
            self.info.kind,
        )
