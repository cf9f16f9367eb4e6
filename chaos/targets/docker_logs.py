"""A container's log, read from where it was last read.

The rig reads an engine's log many times a test (triggers, the stuck table, a verdict's
evidence), and ``docker logs`` sends the whole log each time: on a GPU, where
``--decode-log-interval=1`` writes a line per decode step, that is megabytes per read and
growing. Here each read asks Docker only for the lines since the last one it kept
(``since``, with each line's timestamp), and keeps the text, so callers still see the whole
log as one string. Docker's ``since`` has microsecond precision and is inclusive, and lines
carry nanosecond stamps: each read asks from a microsecond before the last kept stamp, and
drops lines before it, and at it as many as were kept already.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

__all__ = ["ContainerLog"]

Stamp = tuple[int, int]  # seconds since the epoch, nanoseconds


def _stamp(text: str) -> Stamp:
    """Docker's RFC 3339 stamp with up to nine fraction digits (trailing zeros trimmed)."""
    whole, _, frac = text.rstrip("Z").partition(".")
    seconds = int(datetime.fromisoformat(whole).replace(tzinfo=timezone.utc).timestamp())
    return seconds, int((frac + "000000000")[:9])


@dataclass
class ContainerLog:
    """The log of one container (a recreated container starts a new one)."""

    container_id: str
    text: str = ""
    last: Stamp | None = None  # the stamp of the last line kept
    at_last: int = 0  # how many kept lines carry that stamp

    def read(self, container: Any) -> str:
        """The whole log, fetching only what came since the last read."""
        # a microsecond early: a float rounds, and what repeats is dropped below
        since = {} if self.last is None else {"since": self.last[0] + self.last[1] // 1000 / 1e6 - 1e-6}
        raw = container.logs(stdout=True, stderr=True, timestamps=True, **since)
        seen_at_last = 0
        for line in bytes(raw).decode(errors="replace").splitlines(keepends=True):
            stamp_text, _, message = line.partition(" ")
            try:
                stamp = _stamp(stamp_text)
            except ValueError:  # not a stamped line: a continuation Docker split
                self.text += line
                continue
            if self.last is not None and stamp < self.last:
                continue
            if stamp == self.last:
                seen_at_last += 1
                if seen_at_last <= self.at_last:
                    continue
                self.at_last += 1
            else:
                self.last, self.at_last = stamp, 1
            self.text += message
        return self.text
