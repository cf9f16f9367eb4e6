"""Which GPUs the rig's stacks may use, and which stack holds which.

A ``compose-gpu`` stack puts prefill on one GPU and decode on another. A session starts more
than one stack (the session's, and a module's own: ``suites/test_overload.py`` wants a small
engine, ``suites/test_decode_radix_cache.py`` decode's radix cache), so two stacks must never
be handed the same GPU: the second would find its memory taken and fail to start, or worse,
start and run the first one's engines out of memory mid-test. ``PDCHAOS_GPUS`` lists the
devices this run may use (``0,1``, ``2,3,4,5`` or GPU UUIDs: what ``device_ids`` in Compose
takes); runs sharing a host split the host between them with it. Each stack takes two; with
two GPUs only one stack is up at a time, so the plugin runs modules with their own stack
before the session's stack starts (``stacks_at_once``), and a stack asked for while the pool
is empty is a rig error that says which stack holds what.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from chaos.errors import ConfigError

__all__ = ["GPUS_PER_STACK", "GpuPool"]

GPUS_PER_STACK = 2  # prefill's and decode's
DEFAULT_GPUS = ("0", "1")  # compose/gpu.yaml's PREFILL_GPU and DECODE_GPU


@dataclass
class GpuPool:
    """The devices a run may use, handed out two at a time to the stacks it starts."""

    devices: tuple[str, ...]
    _held: dict[str, tuple[str, ...]] = field(default_factory=dict)  # holder -> its devices

    def __post_init__(self) -> None:
        if len(set(self.devices)) != len(self.devices):
            raise ConfigError(f"PDCHAOS_GPUS names a device twice: {','.join(self.devices)}")
        if len(self.devices) < GPUS_PER_STACK:
            raise ConfigError(
                f"PDCHAOS_GPUS={','.join(self.devices)}: a stack needs {GPUS_PER_STACK} GPUs (prefill's and decode's)"
            )

    @classmethod
    def from_env(cls, env: Mapping[str, str] = os.environ) -> "GpuPool":
        raw = env.get("PDCHAOS_GPUS", "")
        devices = tuple(d.strip() for d in raw.split(",") if d.strip()) or DEFAULT_GPUS
        return cls(devices)

    @property
    def stacks_at_once(self) -> int:
        return len(self.devices) // GPUS_PER_STACK

    def take(self, holder: str) -> tuple[str, ...]:
        """Two free devices for ``holder`` (a stack's name), or a ConfigError naming who holds the rest."""
        busy = {d for held in self._held.values() for d in held}
        free = [d for d in self.devices if d not in busy]
        if len(free) < GPUS_PER_STACK:
            holders = "; ".join(f"{h} holds {','.join(ds)}" for h, ds in self._held.items())
            raise ConfigError(
                f"no {GPUS_PER_STACK} free GPUs for {holder}: PDCHAOS_GPUS={','.join(self.devices)} and {holders}. "
                f"A run with {len(self.devices)} GPUs has {self.stacks_at_once} stack(s) up at a time; list more in PDCHAOS_GPUS"
            )
        self._held[holder] = tuple(free[:GPUS_PER_STACK])
        return self._held[holder]

    def give_back(self, holder: str) -> None:
        self._held.pop(holder, None)
