"""The sglang-cpu target: real SGLang prefill and decode engines on CPU, as local processes.

    client --[client_router]--> smg --+--> SGLang prefill (HTTP, bootstrap server)
                                      +--> SGLang decode  (HTTP)
    decode --[bootstrap]--> prefill bootstrap server (route info, heartbeat)
    ------------------------- the stack's network namespace (chaos.system.bridge) ------------------
    decode  --[control]--> prefill's ZMQ port (the handshake: KV args, each room's metadata)
    prefill --[kv]-------> decode's Mooncake TCP transport and handshake ports

The engines are SGLang at the version ``make setup-sglang`` installs into
``.tools/sglang/venv``, serving a tiny random Qwen2 built there from a fixed seed
(``sglang_cpu/tiny_model.py``), with real Mooncake KV transfer over TCP. Toxiproxy sits on
the client's path and on the bootstrap link. The ZMQ control and Mooncake links take ports
SGLang picks itself, so no proxy can sit on them: the engines run in a network namespace of
the stack's own, joined to the host's loopback by the bridge (their HTTP and bootstrap
ports, at the same addresses), and ``kv`` and ``control`` are broken by packet rules there
(``chaos.faults.packet``), keyed on the ports the engines report at each start. It has no
pdsim defects, and no prefill inflight watchdog (upstream SGLang has none). Process
control, logs and readiness are the embedded target's. Without root (no namespaces), the
engines run on the host's loopback and the target lacks those two links.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
from dataclasses import replace
from pathlib import Path
from typing import Callable

import httpx

from chaos.errors import ConfigError, FaultNotApplied
from chaos.faults.packet import PacketLink
from chaos.system.netns import Namespace, nfqueue_available
from chaos.system.procs import ProcSpec, since_last_start
from chaos.system.shm import remove_orphans
from chaos.system.tools import REPO_ROOT
from chaos.system.topology import first_of_kind, is_engine, kind_of, link_ends, link_of
from chaos.system.wait import wait_until
from chaos.targets.base import ENGINE_LINKS, REAL_SGLANG, REAL_SGLANG_LINKS, Capability
from chaos.targets.bringup import RANK_ROUTE, rank_port
from chaos.targets.embedded import EmbeddedStack
from chaos.targets.stack import PortPlan, StackConfig, StackInfo

__all__ = [
    "LAUNCHER",
    "LOCAL_ENGINE_ENV",
    "MODEL_NAME",
    "PACKET_CAPABILITIES",
    "PACKET_LINKS",
    "SGLANG_HOME",
    "SGLangCPUStack",
    "check_installed",
    "packet_links_possible",
    "sglang_cpu_config",
    "sglang_packet_link",
]

SGLANG_HOME = REPO_ROOT / ".tools" / "sglang"
# What an engine run here from the SGLang venv needs of its environment, on any command line
LOCAL_ENGINE_ENV = {
    "PYTHONPATH": "",  # nothing of the rig's environment on the engines' path: the launcher puts the shim there
    "LD_LIBRARY_PATH": ":".join(
        str(SGLANG_HOME / "root" / d / "x86_64-linux-gnu") for d in ("usr/lib", "lib")
    ),  # libibverbs, libnl for Mooncake
}
LAUNCHER = REPO_ROOT / "sglang_cpu" / "launch.py"  # the engines' flags and environment, for this target and Compose
MODEL_NAME = "pdchaos/tiny-qwen2"


def sglang_cpu_config(cfg: StackConfig) -> StackConfig:
    """What this target changes in a stack's configuration: its model, no inflight watchdog,
    and bounds for a real engine (a restart loads the model again: tens of seconds)."""
    return replace(
        cfg,
        model=MODEL_NAME,
        inflight_watchdog=False,
        startup_timeout_s=max(cfg.startup_timeout_s, 240.0),
        restart_s=max(cfg.restart_s, 120.0),  # an engine restart took 57 s on an idle 2-core machine
    )


def packet_links_possible() -> bool:
    """Whether this host lets the stack make a namespace and put rules in it: root, and
    nsenter, iptables and tc installed (``make setup-sglang`` installs them)."""
    return os.geteuid() == 0 and all(shutil.which(t) for t in ("nsenter", "iptables", "tc", "ip"))


_NETNS = packet_links_possible()
PACKET_LINKS = (
    ENGINE_LINKS if _NETNS else ()
)  # what real engines in a namespace of the stack's own lose by packet rules
PACKET_CAPABILITIES = frozenset(
    {Capability.KV_LINK, Capability.CONTROL_LINK, Capability.TRANSFER_WINDOW}
    | ({Capability.LINK_DELAY, Capability.LINK_CORRUPT, Capability.LINK_DUPLICATE} if nfqueue_available() else set())
    if _NETNS
    else set()
)
# Mooncake (0.3.13) logs the ports it listens on: the TCP transport the KV bytes go to, and
# the P2P handshake that precedes a session's first transfer
_MOONCAKE_PORTS = (
    re.compile(r"TcpTransport: listen on port (\d+)"),
    re.compile(r"P2P handshake, listening on [\d.]+:(\d+)"),
)


def sglang_packet_link(
    link: str, namespace: Namespace, decode_log: Callable[[], str], prefill_bootstrap: str, kind: str
) -> PacketLink:
    """Where real SGLang's ``kv`` or ``control`` link goes now, in the engines' ``namespace``:
    decode's Mooncake TCP transport and handshake ports, from its log since its last start
    (``decode_log``); prefill's ZMQ port, from its bootstrap server's ``/route``. Read at each
    injection, since the engines pick these ports at each start. Shared by the local and the
    Compose targets of real SGLang on CPU."""
    if link == "kv":
        log = decode_log()
        found = [m[-1] for m in (rx.findall(log) for rx in _MOONCAKE_PORTS) if m]
        if len(found) != len(_MOONCAKE_PORTS):
            raise FaultNotApplied("decode's log since its start names no Mooncake TCP transport or handshake port yet")
        transport, handshake = (int(p) for p in found)
        return PacketLink(
            namespace, (transport, handshake), f"decode's Mooncake TCP transport {transport} and handshake {handshake}"
        )
    if link == "control":
        try:
            port = rank_port(prefill_bootstrap)
        except (httpx.HTTPError, ValueError, KeyError) as exc:
            url = prefill_bootstrap + RANK_ROUTE
            raise FaultNotApplied(f"prefill's bootstrap server did not give its ZMQ port ({url}): {exc}") from exc
        return PacketLink(namespace, (port,), f"prefill's ZMQ port {port} (decode's handshake and metadata)")
    raise ConfigError(
        f"the {kind} target breaks no link {link!r} with packet rules; it breaks {', '.join(PACKET_LINKS)}"
    )


class SGLangCPUStack(EmbeddedStack):
    """Real SGLang engines in place of pdsim, in the stack's own network namespace;
    everything else as in the embedded stack."""

    KIND = "sglang-cpu"
    LINKS = REAL_SGLANG_LINKS
    START_ORDER = ("toxiproxy", "bridge", "prefill", "decode", "router") if _NETNS else EmbeddedStack.START_ORDER
    packet_links: tuple[str, ...] = PACKET_LINKS
    capabilities = REAL_SGLANG | PACKET_CAPABILITIES

    def __init__(self, info: StackInfo) -> None:
        super().__init__(info)
        # each engine's own: decode2's Mooncake ports (kv2), prefill2's ZMQ port (control2)
        topology = info.topology
        engines = (*topology.prefill_names[1:], *topology.decode_names[1:])
        self.packet_links = PACKET_LINKS + tuple(
            link_of("control" if kind_of(e) == "prefill" else "kv", e) for e in engines if PACKET_LINKS
        )

    @classmethod
    def up(cls, cfg: StackConfig) -> "SGLangCPUStack":
        check_installed()
        return super().up(sglang_cpu_config(cfg))  # type: ignore[return-value]

    def _placed(self, spec: ProcSpec) -> ProcSpec:
        """The engines start inside the bridge's namespace (the bridge that runs now)."""
        if not is_engine(spec.name) or "bridge" not in self.START_ORDER:
            return spec
        return replace(spec, argv=(*Namespace(self.pid("bridge")).enter(), *spec.argv))

    def _wait_ready(self, service: str) -> None:
        if service != "bridge":
            return super()._wait_ready(service)
        pid = self.pid("bridge")
        wait_until(
            lambda: f"namespace /proc/{pid}/ns/net" in self.logs("bridge"),
            timeout_s=10.0,
            what=f"the bridge (pid {pid}) has made the stack's namespace",
        )

    def packet_link(self, link: str) -> PacketLink:
        """Where ``kv`` or ``control`` (or a second engine's ``kv2``, ``control2``) goes now:
        read at each injection, since the engines pick these ports at each start."""
        if link not in self.packet_links:
            raise ConfigError(
                f"the {self.KIND} target breaks no link {link!r}; it breaks {', '.join(self.packet_links)}"
            )
        prefill, decode = link_ends(link)
        return sglang_packet_link(
            first_of_kind(link),
            Namespace(self.pid("bridge")),
            lambda: since_last_start(self.logs(decode), decode),
            self.info.endpoints[f"{prefill}_bootstrap"],
            self.KIND,
        )

    def down(self) -> None:
        """Stop the stack, then remove the /dev/shm files its killed engines could not
        (``chaos.system.shm``): no file outlives the run either."""
        try:
            super().down()
        finally:
            remove_orphans(since=self.info.created - 1.0)

    @classmethod
    def _engine_specs(cls, cfg: StackConfig, ports: PortPlan, logs: Path) -> dict[str, ProcSpec]:
        """Each engine by ``sglang_cpu/launch.py`` (its flags and variables, shared with
        compose/sglang-cpu.yaml) under the SGLang venv's interpreter; and the bridge, which
        makes their namespace: it exports their HTTP ports and prefill's bootstrap server to
        the host, and imports Toxiproxy's bootstrap proxy, which decode dials, and the rig's canary."""
        prefills = [ports.prefill_at(i) for i in range(cfg.topology.prefills)]
        decodes = [ports.decode_at(i) for i in range(cfg.topology.decodes)]
        exported = [port for p in prefills for port in (p.http, p.bootstrap)] + [d.http for d in decodes]
        imported = [p.bootstrap_proxy for p in prefills] + [ports.canary]
        bridge = (
            sys.executable,
            "-m",
            "chaos.system.bridge",
            *(a for port in exported for a in ("--export", str(port))),
            *(a for port in imported for a in ("--import", str(port))),
        )
        return ({"bridge": ProcSpec("bridge", bridge, {}, logs / "bridge.log")} if _NETNS else {}) | cls._sglang_specs(
            cfg, ports, logs
        )

    @staticmethod
    def _sglang_specs(cfg: StackConfig, ports: PortPlan, logs: Path) -> dict[str, ProcSpec]:
        env = cfg.timeouts.to_env(inflight_watchdog=cfg.inflight_watchdog) | cfg.hooks.to_env() | LOCAL_ENGINE_ENV
        common = (str(SGLANG_HOME / "venv" / "bin" / "python"), str(LAUNCHER))
        checksum = ("--disaggregation-enable-kv-checksum",) if cfg.kv_checksum else ()
        model = (
            "--model-path",
            str(SGLANG_HOME / "model"),
            "--served-model-name",
            cfg.model,
            "--max-running-requests",
            str(cfg.max_running_requests),
        )
        specs: dict[str, ProcSpec] = {}
        for i, name in enumerate(cfg.topology.prefill_names):
            p = ports.prefill_at(i)
            argv = (
                *common, "prefill", *model,
                "--port", str(p.http),
                "--nccl-port", str(p.dist),
                "--bootstrap-port", str(p.bootstrap),
                *checksum,
                *cfg.context_flag("prefill"),
            )  # fmt: skip
            specs[name] = ProcSpec(name, argv, env, logs / f"{name}.log")
        for i, name in enumerate(cfg.topology.decode_names):
            d = ports.decode_at(i)
            argv = (
                *common, "decode", *model,
                "--port", str(d.http),
                "--nccl-port", str(d.dist),
                *(("--disaggregation-decode-enable-radix-cache",) if cfg.decode_radix_cache else ()),
                *(("--page-size", str(cfg.decode_page_size)) if cfg.decode_page_size else ()),
                *checksum,
                *cfg.context_flag("decode"),
            )  # fmt: skip
            specs[name] = ProcSpec(name, argv, env, logs / f"{name}.log")
        return specs


def check_installed() -> None:
    """What ``make setup-sglang`` makes must be there, or the start fails with the command."""
    for path, what in (
        (SGLANG_HOME / "venv" / "bin" / "python", "the SGLang venv"),
        (SGLANG_HOME / "model" / ".ready", "the tiny model"),
    ):
        if not path.exists():
            raise ConfigError(f"{what} is missing ({path}): run `make setup-sglang` first")
