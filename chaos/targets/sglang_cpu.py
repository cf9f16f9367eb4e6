"""The sglang-cpu target: real SGLang prefill and decode engines on CPU, as local processes.

    client --[client_router]--> smg --+--> SGLang prefill (HTTP, bootstrap server)
                                      +--> SGLang decode  (HTTP)
    decode --[bootstrap]--> prefill bootstrap server (route info, heartbeat)
    decode <-> prefill: ZMQ control and Mooncake KV over TCP, direct (random ports)

The engines are SGLang at the version ``make setup-sglang`` installs into
``.tools/sglang/venv``, serving a tiny random Qwen2 built there from a fixed seed
(``sglang_cpu/tiny_model.py``), with real Mooncake KV transfer over TCP. Toxiproxy sits on
the client's path and on the bootstrap link; the ZMQ control and Mooncake links take random
ports that SGLang advertises itself, so this target does not claim ``proxied_control`` or
``proxied_kv``. It has no pdsim defects, and no prefill inflight watchdog (upstream SGLang
has none). Process control, logs and readiness are the embedded target's.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from chaos.errors import ConfigError
from chaos.procs import ProcSpec
from chaos.shm import remove_orphans
from chaos.stack import PortPlan, StackConfig
from chaos.targets.base import REAL_SGLANG, REAL_SGLANG_LINKS
from chaos.targets.embedded import EmbeddedStack
from chaos.tools import REPO_ROOT

__all__ = ["LAUNCHER", "MODEL_NAME", "SGLANG_HOME", "SGLangCPUStack", "check_installed", "sglang_cpu_config"]

SGLANG_HOME = REPO_ROOT / ".tools" / "sglang"
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


class SGLangCPUStack(EmbeddedStack):
    """Real SGLang engines in place of pdsim; everything else as in the embedded stack."""

    KIND = "sglang-cpu"
    LINKS = REAL_SGLANG_LINKS
    capabilities = REAL_SGLANG

    @classmethod
    def up(cls, cfg: StackConfig) -> "SGLangCPUStack":
        check_installed()
        return super().up(sglang_cpu_config(cfg))  # type: ignore[return-value]

    def down(self) -> None:
        """Stop the stack, then remove the /dev/shm files its killed engines could not
        (``chaos.shm``): no file outlives the run either."""
        try:
            super().down()
        finally:
            remove_orphans(since=self.info.created - 1.0)

    @staticmethod
    def _engine_specs(cfg: StackConfig, ports: PortPlan, logs: Path) -> dict[str, ProcSpec]:
        """Each engine by ``sglang_cpu/launch.py`` (its flags and variables, shared with
        compose/sglang-cpu.yaml) under the SGLang venv's interpreter."""
        env = cfg.timeouts.to_env() | {
            "PYTHONPATH": "",  # nothing of the rig's environment on the engines' path: the launcher puts the shim there
            "LD_LIBRARY_PATH": ":".join(str(SGLANG_HOME / "root" / d / "x86_64-linux-gnu") for d in ("usr/lib", "lib")),  # libibverbs, libnl for Mooncake
        }
        common = (str(SGLANG_HOME / "venv" / "bin" / "python"), str(LAUNCHER))
        model = ("--model-path", str(SGLANG_HOME / "model"), "--served-model-name", cfg.model, "--max-running-requests", str(cfg.max_running_requests))
        return {
            "prefill": ProcSpec(
                "prefill",
                (*common, "prefill", *model, "--port", str(ports.prefill), "--nccl-port", str(ports.prefill_dist), "--bootstrap-port", str(ports.prefill_bootstrap)),
                env,
                logs / "prefill.log",
            ),
            "decode": ProcSpec(
                "decode",
                (*common, "decode", *model, "--port", str(ports.decode), "--nccl-port", str(ports.decode_dist), *(("--disaggregation-decode-enable-radix-cache",) if cfg.decode_radix_cache else ())),
                env,
                logs / "decode.log",
            ),
        }


def check_installed() -> None:
    """What ``make setup-sglang`` makes must be there, or the start fails with the command."""
    for path, what in ((SGLANG_HOME / "venv" / "bin" / "python", "the SGLang venv"), (SGLANG_HOME / "model" / ".ready", "the tiny model")):
        if not path.exists():
            raise ConfigError(f"{what} is missing ({path}): run `make setup-sglang` first")
