"""The sglang-cpu engines' one patch of SGLang itself: its KV checksum's digest on a CPU.

Why it exists: SGLang 0.5.23 can digest each request's KV on prefill and verify it on decode
(``--disaggregation-enable-kv-checksum``, ``disaggregation/checksum.py``): its defence against
KV corrupted in flight. ``KvChecksumComputer.compute`` asserts that the page indices are on a
GPU and runs a CUDA kernel (``kernels/ops/memory/adler32.py``, JIT-compiled). On a CPU engine
this replaces ``compute`` alone with the same digest's CPU form: Adler-32, run over each
selected item's bytes of each buffer in order (``zlib.adler32``), starting at 1 (the GPU
kernel's value for no items). Both engines of a stack run it, so their digests agree exactly
when the bytes do. Everything around it is SGLang's own: when a digest is taken, how decode
compares it, what a mismatch does (the request aborted with a 500 "KV checksum mismatch",
a transfer failure counted).

Python imports this module at every interpreter start where ``sglang_cpu/shim`` is on
``PYTHONPATH`` (the launcher puts it first for the engines and their scheduler processes); it
only installs an import hook, which patches ``sglang.srt.disaggregation.checksum`` once that
module is imported. It changes nothing where the checksum is off.
"""

from __future__ import annotations

import ctypes
import importlib.abc
import importlib.machinery
import sys
import zlib
from types import ModuleType
from typing import Any

TARGET = "sglang.srt.disaggregation.checksum"


def _cpu_compute(self: Any, kv_page_indices: Any, state_indices: Any = None) -> int:
    """``KvChecksumComputer.compute`` on a CPU: Adler-32 over the items ``kv_page_indices``
    selects in each KV buffer, then ``state_indices`` in each state buffer."""
    work = [(ptr, size, kv_page_indices) for ptr, size in zip(self._kv_data_ptrs, self._kv_item_lens, strict=True)]
    if self._state_data_ptrs:
        if state_indices is None:
            raise ValueError("a state buffer to digest, and no state indices")
        work += [
            (ptr, size, state_indices) for ptr, size in zip(self._state_data_ptrs, self._state_item_lens, strict=True)
        ]
    digest = 1
    for base, size, indices in work:
        for i in indices.tolist():
            digest = zlib.adler32(ctypes.string_at(base + int(i) * size, size), digest)
    return digest


def _patch(module: ModuleType) -> None:
    module.KvChecksumComputer.compute = _cpu_compute


class _PatchOnImport(importlib.abc.MetaPathFinder):
    """Finds nothing itself: wraps the real loader of ``TARGET`` so that the module is
    patched as soon as it has run."""

    def find_spec(self, name: str, path: Any, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if name != TARGET:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return None
        run = spec.loader.exec_module

        def exec_and_patch(module: ModuleType) -> None:
            run(module)
            _patch(module)

        spec.loader.exec_module = exec_and_patch  # type: ignore[method-assign]
        return spec


sys.meta_path.insert(0, _PatchOnImport())
