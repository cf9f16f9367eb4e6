"""A test's time limit, derived from the waits it makes: never one global number.

Every wait of the rig is bounded by a deadline that comes from the target: a stack start by
its startup allowance (240 s for real SGLang on CPU, 900 s on GPU), a restart by the same, a
trigger by its deadline, recovery by ``recovery_s``, a workload by its clients' deadlines. So
a test may spend, in each pytest phase (setup, call, teardown), ``BASE_S`` on the rig's own
work between waits, plus whatever its waits take within their own deadlines:

    limit = phase start + BASE_S + time spent inside waits (each bounded by its own deadline)

A test past that is stuck somewhere no deadline covers (a call without a timeout: a rig
defect), or a wait overran its own deadline. Either way its result is a rig error
(``TimeLimitHit``, an error, never a failed verdict) that names the phase, what the rig was
doing (stack start, inject, trigger, heal) and what it was waiting for.

Only the main thread's outermost wait moves the limit: a wait nested in another is inside
its parent's deadline, and a background thread's waits (an agent restarting decode between
rounds) are inside the main thread's ``join`` of it. Those are named in the message, not
counted. The limit is a SIGALRM on the main thread, as pytest-timeout's signal method; an
explicit ``--timeout`` (or a ``timeout`` mark) hands the test to pytest-timeout instead.
"""

from __future__ import annotations

import signal
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Iterator

from chaos.errors import TimeLimitHit

__all__ = ["BASE_S", "PhaseLimit", "activity", "armed", "waiting"]

# The rig's own work between waits in one pytest phase: verdicts, a report drawn, HTTP calls
# of at most a few seconds each. Seconds of work in practice; minutes mean a hang.
BASE_S = 90.0

_lock = threading.Lock()
_current: "PhaseLimit | None" = None


@dataclass
class _Entry:
    """A wait (with its deadline) or an activity (a label) some thread is inside."""

    label: str
    thread: str
    since: float
    allow_s: float | None = None  # None: an activity, which names what the waits below it serve


@dataclass
class PhaseLimit:
    """One pytest phase's limit; ``arm`` it on the main thread, ``disarm`` it when done."""

    where: str  # "setup of suites/test_x.py::test_y"
    base_s: float = BASE_S
    started: float = field(default_factory=time.monotonic)
    waited_s: float = 0.0  # time the main thread spent in outermost waits that have ended
    _open: list[_Entry] = field(default_factory=list)
    _previous: Any = None

    def _deadline(self) -> float:
        """Now's deadline (under ``_lock``): base, the waits done, the open outermost wait's own."""
        extra = self.waited_s
        outer = self._outermost_main_wait()
        if outer is not None:
            extra += outer.allow_s or 0.0
        return self.started + self.base_s + extra

    def _outermost_main_wait(self) -> _Entry | None:
        main = threading.main_thread().name
        return next((e for e in self._open if e.thread == main and e.allow_s is not None), None)

    def arm(self) -> "PhaseLimit":
        global _current
        self._previous = signal.signal(signal.SIGALRM, self._expired)
        with _lock:
            _current = self
        self._rearm()
        return self

    def disarm(self) -> None:
        global _current
        signal.setitimer(signal.ITIMER_REAL, 0)
        with _lock:
            if _current is self:
                _current = None
        if self._previous is not None:
            signal.signal(signal.SIGALRM, self._previous)

    def _rearm(self) -> None:
        if threading.current_thread() is threading.main_thread():
            with _lock:
                deadline = self._deadline()
            signal.setitimer(signal.ITIMER_REAL, max(0.001, deadline - time.monotonic()))

    def enter(self, entry: _Entry) -> bool:
        """Record ``entry``; True if it is the main thread's outermost wait (it moves the limit)."""
        with _lock:
            outermost = (
                entry.allow_s is not None
                and entry.thread == threading.main_thread().name
                and self._outermost_main_wait() is None
            )
            self._open.append(entry)
        if outermost:
            self._rearm()
        return outermost

    def leave(self, entry: _Entry, *, outermost: bool) -> None:
        with _lock:
            self._open.remove(entry)
            if outermost:
                self.waited_s += time.monotonic() - entry.since
        if outermost:
            self._rearm()

    def describe(self) -> str:
        """Where the test stands: its phase, what each thread is doing and waiting for."""
        now = time.monotonic()
        with _lock:
            entries = list(self._open)
        main = threading.main_thread().name
        mine = [e for e in entries if e.thread == main]
        others = [e for e in entries if e.thread != main]

        def chain(es: list[_Entry]) -> str:
            return " > ".join(
                e.label + (f" (waited {now - e.since:.1f}s of its {e.allow_s:g}s)" if e.allow_s is not None else "")
                for e in es
            )

        doing = chain(mine) if mine else "the rig's own work, outside any bounded wait (a call without a deadline?)"
        text = (
            f"test limit hit in the {self.where} after {now - self.started:.1f}s "
            f"(base {self.base_s:g}s + {self.waited_s:.1f}s in waits that ended): {doing}"
        )
        by_thread: dict[str, list[_Entry]] = {}
        for e in others:
            by_thread.setdefault(e.thread, []).append(e)
        if by_thread:
            text += "; meanwhile " + "; ".join(f"{t}: {chain(es)}" for t, es in by_thread.items())
        return text

    def _expired(self, signum: int, frame: Any) -> None:
        signal.setitimer(signal.ITIMER_REAL, 0)  # once: the heals and reports after it get the teardown's own limit
        raise TimeLimitHit(self.describe())


def armed() -> PhaseLimit | None:
    """The limit of the test running now, if any (none outside pytest: ``pdchaos`` commands)."""
    with _lock:
        return _current


@contextmanager
def _inside(label: str, allow_s: float | None) -> Iterator[None]:
    limit = armed()
    if limit is None:
        yield
        return
    entry = _Entry(label, threading.current_thread().name, time.monotonic(), allow_s)
    outermost = limit.enter(entry)
    try:
        yield
    finally:
        limit.leave(entry, outermost=outermost)


def waiting(what: str, allow_s: float) -> Any:
    """A bounded wait: the test may spend up to ``allow_s`` in it on top of its base.
    Used by every wait of the rig (``chaos.system.wait``, the sampler's polls, workloads' joins,
    a client's request); a no-op when no test is running."""
    return _inside(what, max(0.0, float(allow_s)))


def activity(what: str) -> Any:
    """Names what the waits inside serve (a stack start, a fault's heal) for the message."""
    return _inside(what, None)
