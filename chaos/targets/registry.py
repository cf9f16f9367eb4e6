"""Choosing a target by name (``--target``) and finding the target of a saved stack.

embedded      local processes: Toxiproxy, pdsim prefill and decode, smg
sglang-cpu    local processes: Toxiproxy, real SGLang prefill and decode on CPU, smg
gpu-on-cpu    sglang-cpu whose engines run compose-gpu's own command lines, swapped for CPU
compose       the same as containers: compose/stack.yaml + compose/cpu.yaml
compose-sglang-cpu  real SGLang on CPU as containers: compose/stack.yaml + compose/sglang-cpu.yaml
compose-gpu   real SGLang on GPUs: compose/stack.yaml + compose/gpu.yaml (Mooncake over TCP)
compose-gpu-rdma  the same with Mooncake over RDMA: + compose/gpu-rdma.yaml
attach        a running deployment described by a stack file (--stack-file)
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

from chaos.errors import ChaosError, ConfigError
from chaos.system.cleanup import orphan_ledgers
from chaos.system.gpus import GpuPool
from chaos.system.topology import Topology
from chaos.targets.base import Capability, Target
from chaos.targets.gpu import GPU, GPU_DEFAULT_MODEL, GPU_STARTUP_TIMEOUT_S, GPU_STATE_CHANGE_S, GPU_WARM_UP_WORDS
from chaos.targets.stack import StackConfig, StackInfo

if TYPE_CHECKING:
    from chaos.targets.embedded import EmbeddedStack

__all__ = ["LOCAL", "TARGETS", "TargetChoice", "load_target", "reap_orphans"]

TARGETS = (
    "embedded",
    "sglang-cpu",
    "gpu-on-cpu",
    "compose",
    "compose-sglang-cpu",
    "compose-gpu",
    "compose-gpu-rdma",
    "attach",
)
LOCAL = ("embedded", "sglang-cpu", "gpu-on-cpu")  # targets run as local processes


@dataclass(frozen=True)
class TargetChoice:
    """A target name and what it needs; checked when made, so a bad choice fails at once."""

    name: str
    stack_file: Path | None = None
    allow_destructive: bool = False

    def __post_init__(self) -> None:
        if self.name not in TARGETS:
            raise ConfigError(f"target {self.name!r} is unknown; known targets: {', '.join(TARGETS)}")
        if self.name == "attach" and self.stack_file is None:
            raise ConfigError("target attach needs --stack-file FILE (a YAML description of the deployment)")

    @property
    def starts_stacks(self) -> bool:
        """Whether the rig starts (and may configure) its own stacks on this target."""
        return self.name != "attach"

    @property
    def sets_engine_options(self) -> bool:
        """Whether its stacks can start their engines with the KV checksum on and with SGLang's
        failure hooks (``StackConfig.kv_checksum``, ``hooks``): the local targets and the
        Compose variants whose overlays pass them; not an attached deployment."""
        if self.name in LOCAL:
            return True
        from chaos.targets.compose import VARIANTS

        return self.name in VARIANTS and VARIANTS[self.name].engine_options

    @property
    def runs_topologies(self) -> bool:
        """Whether its stacks can run more than one engine of a kind (``StackConfig.topology``):
        the embedded and sglang-cpu targets. Compose's files name one service of each, and
        gpu-on-cpu runs their command lines."""
        return self.name in ("embedded", "sglang-cpu")

    @cached_property
    def _attached(self) -> Target:
        """The attached deployment, its stack file read and checked once (not once per skip)."""
        from chaos.targets.attach import AttachedStack

        assert self.stack_file is not None
        return AttachedStack.from_file(self.stack_file, allow_destructive=self.allow_destructive)

    @cached_property
    def gpu_pool(self) -> GpuPool | None:
        """The GPUs this run's stacks share (``PDCHAOS_GPUS``), on a GPU target."""
        return GpuPool.from_env() if self.name in GPU else None

    @property
    def stacks_at_once(self) -> int | None:
        """How many of its stacks this target can have up at once (None: as many as ports allow)."""
        return self.gpu_pool.stacks_at_once if self.gpu_pool is not None else None

    def capabilities(self) -> frozenset[Capability]:
        if self.name in LOCAL:
            return _local_class(self.name).capabilities
        if self.name == "attach":
            return self._attached.capabilities
        from chaos.targets.compose import VARIANTS

        return VARIANTS[self.name].capabilities

    def missing_reason(self, cap: Capability) -> str:
        if self.name == "attach":
            reason: str = self._attached.missing_reason(cap)  # type: ignore[attr-defined]
            return reason
        return f"target {self.name} lacks {cap.value}"

    def start(self, cfg: StackConfig) -> Target:
        if cfg.topology != Topology() and not self.runs_topologies:
            raise ConfigError(f"target {self.name} runs one engine of each kind, not {cfg.topology}")
        if self.name in LOCAL:
            return _local_class(self.name).up(cfg)
        if self.name == "attach":
            return self._attached
        from chaos.targets.compose import ComposeStack

        if self.name == "compose-sglang-cpu":
            from chaos.targets.sglang_cpu import check_installed, sglang_cpu_config

            check_installed()
            cfg = sglang_cpu_config(cfg)
        if self.gpu_pool is None:
            return ComposeStack.up(cfg, self.name)
        holder = _holder(cfg.port_base)
        cfg = replace(
            cfg,
            startup_timeout_s=max(
                cfg.startup_timeout_s, GPU_STARTUP_TIMEOUT_S
            ),  # SGLang loads a model and captures CUDA graphs first
            restart_s=max(cfg.restart_s, GPU_STARTUP_TIMEOUT_S),
            state_change_s=max(cfg.state_change_s, GPU_STATE_CHANGE_S),
            warm_up_words=GPU_WARM_UP_WORDS,
            model=os.environ.get("SGLANG_MODEL", GPU_DEFAULT_MODEL),  # gpu.yaml serves it under this name
            inflight_watchdog=False,  # upstream SGLang has none
            gpus=self.gpu_pool.take(holder),
        )
        try:
            return ComposeStack.up(cfg, self.name)
        except BaseException:
            self.gpu_pool.give_back(holder)
            raise

    def stopped(self, stack: Target) -> None:
        """``stack`` is down: what it held (its GPUs) is free for the next one."""
        if self.gpu_pool is not None:
            self.gpu_pool.give_back(_holder(stack.info.port_base))


def _holder(port_base: int) -> str:
    return f"the stack on port base {port_base}"


def load_target(state_dir: Path) -> Target:
    """The target of the stack saved in ``state_dir/stack.json``, whichever kind started it."""
    kind = StackInfo.load(state_dir).kind
    if kind in LOCAL:
        return _local_class(kind).attach(state_dir)
    from chaos.targets.compose import VARIANTS, ComposeStack

    if kind in VARIANTS:
        return ComposeStack.attach(state_dir)
    raise ConfigError(f"{Path(state_dir) / 'stack.json'} describes a {kind!r} stack, which pd-chaos cannot stop")


def _local_class(name: str) -> "type[EmbeddedStack]":
    """The class of a local-process target (imported on demand: the others need none of it)."""
    if name == "sglang-cpu":
        from chaos.targets.sglang_cpu import SGLangCPUStack

        return SGLangCPUStack
    if name == "gpu-on-cpu":
        from chaos.targets.gpu_on_cpu import GpuOnCpuStack

        return GpuOnCpuStack
    from chaos.targets.embedded import EmbeddedStack

    return EmbeddedStack


def reap_orphans() -> list[str]:
    """Stop every stack listed by a session whose process has died (its processes or its
    Compose project, whichever target started it: ``chaos.system.cleanup.orphan_ledgers``);
    returns the state folders reaped."""
    reaped: list[str] = []
    for ledger, folders in orphan_ledgers():
        for folder in folders:
            try:
                target = load_target(Path(folder))
            except ConfigError:
                continue
            with contextlib.suppress(ChaosError):
                target.down()
            reaped.append(folder)
        ledger.unlink(missing_ok=True)
    return reaped
