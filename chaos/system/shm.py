"""Shared-memory files a killed SGLang engine leaves in ``/dev/shm``.

SGLang 0.5.23 publishes its load snapshot in ``/dev/shm/sglang_loads_<id>_<hash>.shm``
(``managers/load_snapshot.py``), and its Python multiprocessing makes named semaphores
``/dev/shm/sem.mp-*``. A clean shutdown removes both; SIGKILL, which the suites send on
purpose, cannot. Their names are random, so the rig cannot know them in advance: a file is
an orphan when it matches those patterns, appeared after a given time (the stack's start),
and no live process maps it (``/proc/<pid>/maps``). Engines in Compose have a ``/dev/shm``
of their own, gone with the container, except on the GPU overlays: ``ipc: host`` puts their
files in the host's, and the compose target removes them at down (``Variant.host_ipc``).
"""

from __future__ import annotations

import contextlib
from pathlib import Path

__all__ = ["ENGINE_PATTERNS", "orphans", "remove_orphans"]

SHM = Path("/dev/shm")
ENGINE_PATTERNS = ("sglang_loads_*.shm", "sem.mp-*")


def _mapped() -> set[str]:
    """Every /dev/shm path some live process maps; processes that vanish mid-scan are skipped."""
    paths: set[str] = set()
    for maps in Path("/proc").glob("[0-9]*/maps"):
        with contextlib.suppress(OSError):
            for line in maps.read_text().splitlines():
                if "/dev/shm/" in line:
                    paths.add(line[line.index("/dev/shm/") :].removesuffix(" (deleted)"))
    return paths


def orphans(since: float, shm: Path = SHM) -> list[Path]:
    """Engine files in ``shm`` modified at or after ``since`` (epoch seconds) that nobody maps."""
    found = []
    for pattern in ENGINE_PATTERNS:
        for path in shm.glob(pattern):
            with contextlib.suppress(FileNotFoundError):
                if path.stat().st_mtime >= since:
                    found.append(path)
    if not found:
        return []
    mapped = _mapped()
    return sorted(p for p in found if str(p) not in mapped)


def remove_orphans(since: float, shm: Path = SHM) -> int:
    """Delete what ``orphans`` finds; returns how many went."""
    gone = 0
    for path in orphans(since, shm):
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
            gone += 1
    return gone
