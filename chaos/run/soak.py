"""The soak's clock: ``pytest suites --soak 30m`` gives the soak scenario its duration, and
``Soak.cycles()`` counts its cycles until the duration is spent (bounded in count too: no
load loop runs unbounded). Without ``--soak`` the soak scenario skips: it is opt-in."""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import Iterator

__all__ = ["MAX_CYCLES", "Soak", "parse_duration"]

MAX_CYCLES = 100_000  # a bound on the loop whatever the duration says
_UNITS = {"s": 1, "m": 60, "h": 3600}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smh]?)\s*$")


def parse_duration(text: str) -> float:
    """ "90s", "30m", "2h" or plain seconds; a duration that is not one is an error."""
    m = _DURATION.match(text)
    if m is None or float(m.group(1)) <= 0:
        raise ValueError(f"not a duration: {text!r} (say 90s, 30m or 2h)")
    return float(m.group(1)) * _UNITS[m.group(2) or "s"]


@dataclass(frozen=True)
class Soak:
    duration_s: float

    def cycles(self) -> Iterator[int]:
        """Cycle numbers until the duration is spent: a cycle that starts runs to its end."""
        deadline = time.monotonic() + self.duration_s
        for n in range(MAX_CYCLES):
            if time.monotonic() >= deadline:
                return
            yield n
