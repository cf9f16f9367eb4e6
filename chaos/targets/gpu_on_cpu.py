"""The gpu-on-cpu target: the GPU targets' own engine command lines, run on CPU.

Nothing here has a GPU, so CI cannot run compose-gpu. What it can run is what compose-gpu
runs: each engine's entrypoint, command and environment exactly as Compose renders
``compose/stack.yaml + gpu.yaml + gpu-tcp.yaml`` for the stack, with the one swap a CPU
needs (``sglang_cpu/launch.py``: ``CPU_SWAP``, ``ROLE_SWAP``, ``CPU_ENV``; the model path is
the local tiny model's), started as local processes the way the sglang-cpu target starts its
engines. A flag renamed upstream, a value SGLang rejects at startup, or a variable that
breaks the engine fails here, on CPU, before a nightly run does on a GPU. The rest of the
stack (Toxiproxy, smg, the namespace) is the sglang-cpu target's.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from chaos.errors import ConfigError
from chaos.system.procs import ProcSpec
from chaos.targets.compose import compose_env, rendered
from chaos.targets.gpu import GPU_WARM_UP_WORDS
from chaos.targets.sglang_cpu import LOCAL_ENGINE_ENV, SGLANG_HOME, SGLangCPUStack
from chaos.targets.stack import PortPlan, StackConfig
from sglang_cpu.launch import cpu_environment, on_cpu

__all__ = ["GPU_VARIANT", "GpuOnCpuStack", "gpu_lines"]

GPU_VARIANT = "compose-gpu"  # Mooncake over TCP: RDMA needs an HCA (its lines are resolved, not run)
_LAUNCH = ("-m", "sglang.launch_server")


def gpu_lines(cfg: StackConfig, variant: str = GPU_VARIANT, **env: str) -> dict[str, tuple[list[str], dict[str, str]]]:
    """Each engine's arguments after ``python3 -m sglang.launch_server`` (its entrypoint's own
    flags first, then its command) and its environment, as Compose renders ``variant`` for
    this stack, serving ``cfg.model``; ``env``, what an admin sets besides (SGLANG_IB_DEVICE)."""
    model = rendered(variant, compose_env(cfg) | {"SGLANG_MODEL": cfg.model} | env, f"pdchaos-{cfg.port_base}")
    lines = {}
    for role in ("prefill", "decode"):
        svc = model["services"][role]
        entrypoint = [str(a) for a in svc["entrypoint"]]
        if entrypoint[1:3] != list(_LAUNCH):
            raise ConfigError(f"{variant}'s {role} does not run `python3 -m sglang.launch_server`: {entrypoint}")
        lines[role] = ([*entrypoint[3:], *map(str, svc["command"])], dict(svc.get("environment") or {}))
    return lines


class GpuOnCpuStack(SGLangCPUStack):
    """The sglang-cpu stack whose engines run compose-gpu's command lines, swapped for CPU,
    warmed up as the GPU targets warm theirs."""

    KIND = "gpu-on-cpu"

    @classmethod
    def up(cls, cfg: StackConfig) -> "GpuOnCpuStack":
        return super().up(replace(cfg, warm_up_words=GPU_WARM_UP_WORDS))  # type: ignore[return-value]

    @staticmethod
    def _sglang_specs(cfg: StackConfig, ports: PortPlan, logs: Path) -> dict[str, ProcSpec]:
        python = str(SGLANG_HOME / "venv" / "bin" / "python")  # the image's python3, here the venv's
        specs = {}
        for role, (argv, env) in gpu_lines(cfg).items():
            engine_env = cpu_environment(role, LOCAL_ENGINE_ENV | env)
            specs[role] = ProcSpec(
                role,
                (python, *_LAUNCH, *on_cpu(argv, role, str(SGLANG_HOME / "model"))),
                engine_env,
                logs / f"{role}.log",
            )
        return specs
