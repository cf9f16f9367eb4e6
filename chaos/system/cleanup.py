"""Nothing the rig starts may outlive it: Ctrl-C, SIGTERM, a second Ctrl-C, or a crash.

* ``terminate_as_interrupt()`` makes SIGTERM behave as Ctrl-C, and makes only the first
  of them count: later ones are ignored (with a note) while teardown heals and stops
  everything, so a second Ctrl-C cannot cut it in half. Every rig wait is bounded, so the
  teardown is too; SIGKILL still works, and the next session reaps what it leaves.
* ``shielded()`` holds off SIGINT and SIGTERM while a cleanup runs.
* Each process that starts stacks lists their state folders in
  ``.pdchaos/sessions/<pid>.txt``; ``orphan_ledgers()`` names the sessions whose process
  is gone, and ``chaos.targets.registry.reap_orphans()`` (run when a new session starts)
  stops their stacks (processes or Compose containers): a crashed run's leftovers.
"""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path
from typing import Iterator

from chaos.system.procs import alive
from chaos.system.tools import REPO_ROOT

__all__ = ["orphan_ledgers", "register", "shielded", "terminate_as_interrupt", "unregister"]

SESSIONS = Path(os.environ.get("PDCHAOS_SESSIONS_DIR", REPO_ROOT / ".pdchaos" / "sessions"))


def _ledger(pid: int | None = None) -> Path:
    return SESSIONS / f"{pid or os.getpid()}.txt"


def register(state_dir: Path) -> None:
    SESSIONS.mkdir(parents=True, exist_ok=True)
    with open(_ledger(), "a") as f:
        f.write(f"{Path(state_dir).resolve()}\n")


def unregister(state_dir: Path) -> None:
    ledger = _ledger()
    if not ledger.exists():
        return
    keep = [ln for ln in ledger.read_text().splitlines() if ln and ln != str(Path(state_dir).resolve())]
    if keep:
        ledger.write_text("\n".join(keep) + "\n")
    else:
        ledger.unlink(missing_ok=True)


def orphan_ledgers() -> Iterator[tuple[Path, list[str]]]:
    """Each ledger of a session whose process is gone, with the state folders it lists: the
    stacks a crashed run left (``chaos.targets.registry.reap_orphans`` stops them)."""
    if not SESSIONS.is_dir():
        return
    for ledger in SESSIONS.glob("*.txt"):
        try:
            owner = int(ledger.stem)
        except ValueError:
            continue
        if owner == os.getpid() or alive(owner):
            continue
        yield ledger, ledger.read_text().splitlines()


def _cleaning_up(signum: int, frame: object) -> None:
    os.write(2, b"\npd-chaos: cleaning up (healing faults, stopping stacks); further interrupts are ignored\n")


def _raise_interrupt(signum: int, frame: object) -> None:
    for s in (signal.SIGINT, signal.SIGTERM):
        signal.signal(s, _cleaning_up)
    raise KeyboardInterrupt(f"signal {signum}")


def terminate_as_interrupt() -> None:
    """SIGINT and SIGTERM raise KeyboardInterrupt in the main thread, once."""
    for s in (signal.SIGINT, signal.SIGTERM):
        signal.signal(s, _raise_interrupt)


@contextlib.contextmanager
def shielded() -> Iterator[None]:
    """Ignore SIGINT and SIGTERM for the duration of a cleanup (main thread only)."""
    try:
        old = {s: signal.signal(s, signal.SIG_IGN) for s in (signal.SIGINT, signal.SIGTERM)}
    except ValueError:  # not the main thread: nothing to shield
        yield
        return
    try:
        yield
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)
