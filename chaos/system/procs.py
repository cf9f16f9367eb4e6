"""Local processes: start in their own process group, signal, read state, stop for sure.

Every service the embedded stack starts runs in a new session, so one ``killpg`` reaches
it and anything it spawned. Stopping escalates from SIGTERM to SIGKILL after a deadline.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from chaos.errors import TargetError
from chaos.system.limits import waiting
from chaos.system.wait import STATE_CHANGE_S, wait_until

__all__ = [
    "ProcSpec",
    "alive",
    "proc_state",
    "run",
    "signal_group",
    "since_last_start",
    "spawn",
    "stop_group",
    "stop_groups",
]


@dataclass(frozen=True)
class ProcSpec:
    """How to (re)start one service: its argv, extra environment and log file."""

    name: str
    argv: tuple[str, ...]
    env: dict[str, str]
    log: Path

    def to_json(self) -> dict[str, object]:
        return {"argv": list(self.argv), "env": self.env, "log": str(self.log)}

    @classmethod
    def from_json(cls, name: str, raw: dict[str, Any]) -> "ProcSpec":
        return cls(name, tuple(raw["argv"]), dict(raw["env"]), Path(str(raw["log"])))


def run(argv: Sequence[str], *, timeout_s: float, what: str = "", **kw: Any) -> subprocess.CompletedProcess[str]:
    """A command run to its end within ``timeout_s`` (text output captured, no stdin): a
    bounded wait like any other (``chaos.system.limits``); past its bound, a ``TargetError``."""
    what = what or f"`{' '.join(argv)[:120]}` to exit"
    try:
        with waiting(what, timeout_s):
            return subprocess.run(
                list(argv), capture_output=True, text=True, timeout=timeout_s, stdin=subprocess.DEVNULL, **kw
            )
    except subprocess.TimeoutExpired as exc:
        raise TargetError(f"{what}: took over {timeout_s:g} s") from exc


def _start_mark(name: str) -> str:
    """The line ``spawn`` writes into a service's log before each start, up to its time."""
    return f"---- pdchaos: start {name} at "


def since_last_start(log: str, name: str) -> str:
    """The part of a service's log written since its latest start (the whole log if none)."""
    return log[max(0, log.rfind(_start_mark(name))) :]


def spawn(spec: ProcSpec) -> int:
    """Start the process detached (own session), appending to its log; returns the pid."""
    spec.log.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, **spec.env}
    with open(spec.log, "ab") as log:
        log.write(f"{_start_mark(spec.name)}{time.time():.6f}: {' '.join(spec.argv)}\n".encode())
        log.flush()
        try:
            proc = subprocess.Popen(
                spec.argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
                close_fds=True,
            )
        except OSError as exc:
            raise TargetError(f"cannot start {spec.name} ({spec.argv[0]}): {exc}") from exc
    _CHILDREN[proc.pid] = proc
    return proc.pid


# Popen objects of our own children, so that they are reaped (no zombies) once they exit.
_CHILDREN: dict[int, subprocess.Popen[bytes]] = {}


def proc_state(pid: int) -> str | None:
    """The state letter from /proc/<pid>/stat (R, S, T, Z, ...), or None if gone."""
    child = _CHILDREN.get(pid)
    if child is not None and child.poll() is not None:
        _CHILDREN.pop(pid, None)
        return None
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return stat.rpartition(")")[2].split()[0]


def alive(pid: int) -> bool:
    state = proc_state(pid)
    return state is not None and state != "Z"


def signal_group(pid: int, sig: signal.Signals) -> bool:
    """Signal the whole process group led by ``pid``; False if it is already gone."""
    try:
        os.killpg(pid, sig)
        return True
    except ProcessLookupError:
        return False
    except PermissionError as exc:
        raise TargetError(f"not allowed to signal process group {pid}: {exc}") from exc


def stop_group(pid: int, *, grace_s: float = 5.0) -> None:
    """SIGCONT (a frozen process cannot exit), SIGTERM, then SIGKILL after ``grace_s``."""
    stop_groups([pid], grace_s=grace_s)


def stop_groups(pids: Sequence[int], *, grace_s: float = 5.0) -> None:
    """``stop_group`` for several process groups at once: all are signalled together and
    share one grace, so a stack of four services stops in the slowest one's time, not in
    the sum of them (a test's teardown took 3.2 s one after the other on embedded)."""
    running = []
    for pid in pids:
        if signal_group(pid, signal.SIGCONT):
            running.append(pid)
        else:
            proc_state(pid)  # reaps it if it was our child
    for pid in running:
        signal_group(pid, signal.SIGTERM)
    try:
        wait_until(
            lambda: not any(alive(p) for p in running),
            timeout_s=grace_s,
            what=f"processes {running} exit after SIGTERM",
        )
    except TargetError:
        left = [p for p in running if alive(p)]
        for pid in left:
            signal_group(pid, signal.SIGKILL)
        wait_until(
            lambda: not any(alive(p) for p in left),
            timeout_s=STATE_CHANGE_S,
            what=f"processes {left} exit after SIGKILL",
        )
