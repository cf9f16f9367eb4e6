"""Orphaned SGLang shared-memory files are found by name, age and whether a live process
maps them; a mapped file, an old file and a stranger's file are left alone."""

from __future__ import annotations

import mmap
import os
import time
import uuid

import pytest

from chaos.system.shm import SHM, orphans, remove_orphans

pytestmark = pytest.mark.skipif(not SHM.is_dir(), reason="no /dev/shm")


def test_only_unmapped_engine_files_since_the_start_are_orphans():
    tag = uuid.uuid4().hex[:8]
    since = time.time() - 1
    held, dropped, stranger, old = (
        SHM / f"sem.mp-pdchaos{tag}a",
        SHM / f"sglang_loads_pdchaos{tag}_b.shm",
        SHM / f"pdchaos{tag}-other",
        SHM / f"sem.mp-pdchaos{tag}old",
    )
    try:
        for p in (held, dropped, stranger, old):
            p.write_bytes(b"\0" * mmap.PAGESIZE)
        os.utime(old, (since - 60, since - 60))
        with open(held, "r+b") as f, mmap.mmap(f.fileno(), mmap.PAGESIZE):
            mine = [p for p in orphans(since) if tag in p.name]
            assert mine == [dropped]
            assert remove_orphans(since) >= 1
            assert held.exists() and stranger.exists() and old.exists() and not dropped.exists()
    finally:
        for p in (held, dropped, stranger, old):
            p.unlink(missing_ok=True)
