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
from chaos.stack import LOOPBACK, PortPlan, StackConfig
from chaos.targets.base import REAL_SGLANG, REAL_SGLANG_LINKS
from chaos.targets.embedded import EmbeddedStack
from chaos.tools import REPO_ROOT

__all__ = ["MODEL_NAME", "SGLANG_HOME", "SHIM", "SGLangCPUStack", "check_installed", "sglang_cpu_config"]

SGLANG_HOME = REPO_ROOT / ".tools" / "sglang"
SHIM = REPO_ROOT / "sglang_cpu" / "shim"
MODEL_NAME = "pdchaos/tiny-qwen2"

# What makes SGLang run (and stay cheap) on a CPU, from the trial in issue 12; each is checked
# against sglang 0.5.23's source: see README "The sglang-cpu target".
_ENGINE_FLAGS = (
    "--device", "cpu", "--attention-backend", "torch_native", "--disable-overlap-schedule",
    "--disaggregation-transfer-backend", "mooncake_tcp", "--enable-metrics",
    "--sleep-on-idle",  # otherwise each idle scheduler spins a whole core
    "--max-total-tokens", "65536", "--max-running-requests", "32", "--dtype", "bfloat16",
    "--decode-log-interval", "1",  # decode's queue gauges are set when it logs stats: every step, not every 40
    "--log-requests", "--log-requests-level", "0",  # one line per request with its rid, for the stuck table
    "--skip-server-warmup",
)  # fmt: skip


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

    @staticmethod
    def _engine_specs(cfg: StackConfig, ports: PortPlan, logs: Path) -> dict[str, ProcSpec]:
        py = str(SGLANG_HOME / "venv" / "bin" / "python")
        env = cfg.timeouts.to_env() | {
            "PYTHONPATH": str(SHIM),  # sgl_kernel: see sglang_cpu/shim/sgl_kernel/__init__.py
            "LD_LIBRARY_PATH": ":".join(str(SGLANG_HOME / "root" / d / "x86_64-linux-gnu") for d in ("usr/lib", "lib")),  # libibverbs, libnl for Mooncake
            "SGLANG_USE_CPU_ENGINE": "1",
            "SGLANG_HOST_IP": LOOPBACK,  # what SGLang advertises to its peer: loopback only
            "MC_FORCE_TCP": "1",
            "MC_TCP_BIND_ADDRESS": LOOPBACK,
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "OMP_NUM_THREADS": "1",
            "PYTHONUNBUFFERED": "1",
        }
        common = (
            "-m", "sglang.launch_server", "--model-path", str(SGLANG_HOME / "model"),
            "--served-model-name", cfg.model, "--host", LOOPBACK, *_ENGINE_FLAGS,
        )  # fmt: skip
        return {
            "prefill": ProcSpec(
                "prefill",
                (py, *common, "--port", str(ports.prefill), "--nccl-port", str(ports.prefill_dist),
                 "--disaggregation-mode", "prefill", "--disaggregation-bootstrap-port", str(ports.prefill_bootstrap)),
                # otherwise the first request reaches pin_memory and torch.cuda.Event (disaggregation/prefill.py)
                env | {"SGLANG_DISAGGREGATION_ALL_CP_RANKS_TRANSFER": "1"},
                logs / "prefill.log",
            ),  # fmt: skip
            "decode": ProcSpec(
                "decode",
                (py, *common, "--port", str(ports.decode), "--nccl-port", str(ports.decode_dist),
                 "--disaggregation-mode", "decode",
                 "--disaggregation-decode-retraction-backup", "cpu_tensor"),  # otherwise torch.cuda.cudart() at startup
                env,
                logs / "decode.log",
            ),  # fmt: skip
        }


def check_installed() -> None:
    """What ``make setup-sglang`` makes must be there, or the start fails with the command."""
    for path, what in ((SGLANG_HOME / "venv" / "bin" / "python", "the SGLang venv"), (SGLANG_HOME / "model" / ".ready", "the tiny model")):
        if not path.exists():
            raise ConfigError(f"{what} is missing ({path}): run `make setup-sglang` first")
