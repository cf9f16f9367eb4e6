"""What the GPU targets need that the others do not: their names, and how long a GPU
engine may take to start, to stop and to warm up (read by the registry, the GPU host's
checks and the GPU-on-CPU rehearsal alike)."""

from __future__ import annotations

__all__ = ["GPU", "GPU_DEFAULT_MODEL", "GPU_STARTUP_TIMEOUT_S", "GPU_STATE_CHANGE_S", "GPU_WARM_UP_WORDS"]

GPU = ("compose-gpu", "compose-gpu-rdma")  # targets whose engines take GPUs from the run's pool
GPU_STARTUP_TIMEOUT_S = 900.0
# a SIGKILLed GPU engine's container exits once the driver has taken back its device memory
# (about 40 GB at the default memory fraction on an 80 GB GPU): tens of seconds, not one
GPU_STATE_CHANGE_S = 90.0
# the suites' shortest served prompt, and their longest (suites/test_idle_watchdog.py's
# 1500 words): kernels compiled on first use for each are compiled at warm-up, into the
# kept JIT cache, not inside a 3 s bootstrap or 6 s waiting timeout
GPU_WARM_UP_WORDS = (2, 1500)
GPU_DEFAULT_MODEL = "Qwen/Qwen2.5-0.5B-Instruct"  # compose/gpu.yaml's default SGLANG_MODEL
