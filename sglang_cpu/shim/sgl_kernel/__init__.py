"""A CPU stand-in for SGLang's ``sgl_kernel`` package, for the sglang-cpu target only.

Why it exists: PyPI's ``sglang-kernel`` is built for CUDA only, yet SGLang 0.5.23 imports
``sgl_kernel`` unconditionally on its CPU path (``kernels/ops/kvcache/cache_move.py`` and
``mem_cache/allocation.py``). This package sits first on the engines' ``PYTHONPATH``. It
implements the one kernel a CPU PD engine calls, ``assign_req_to_token_pool_cpu``, in
plain torch (the semantics of the Triton kernel ``assign_req_to_token_pool`` beside it).
Every other name resolves to a function that raises when called, so a path we did not
expect fails loudly instead of computing something wrong. ``torch.ops.sgl_kernel`` gets no
ops, so ``cpu_has_amx_support()`` reads false and SGLang takes its native torch paths.
"""

from __future__ import annotations

from typing import Any, Callable

import torch

__all__ = ["assign_req_to_token_pool_cpu"]


def assign_req_to_token_pool_cpu(
    req_pool_indices: torch.Tensor,
    req_to_token: torch.Tensor,
    start_offset: torch.Tensor,
    end_offset: torch.Tensor,
    out_cache_loc: torch.Tensor,
    pool_len: int,
) -> None:
    """For request i of the batch, write its slice of ``out_cache_loc`` (requests laid end to
    end) into ``req_to_token[req_pool_indices[i], start_offset[i]:end_offset[i]]``."""
    del pool_len  # the row length is req_to_token's own
    out = 0
    for row, start, end in zip(req_pool_indices.tolist(), start_offset.tolist(), end_offset.tolist(), strict=True):
        n = end - start
        req_to_token[row, start:end] = out_cache_loc[out : out + n].to(req_to_token.dtype)
        out += n


def __getattr__(name: str) -> Callable[..., Any]:
    if name.startswith("__"):
        raise AttributeError(name)

    def unavailable(*_args: Any, **_kwargs: Any) -> Any:
        raise NotImplementedError(f"sgl_kernel.{name} is not available in pd-chaos' CPU shim (sglang_cpu/shim)")

    unavailable.__name__ = name
    return unavailable
