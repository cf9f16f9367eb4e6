"""One structured (logfmt) line per request state change, with rid and bootstrap_room.

The rig's log triggers and the "where is it stuck" table read these lines, so their
keys are part of pdsim's interface: ``event=req rid=... bootstrap_room=... state=...``.
"""

from __future__ import annotations

import logging
import sys
import time

__all__ = ["configure", "log_event", "logger"]

logger = logging.getLogger("pdsim")


def configure(engine: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        logging.Formatter(f"%(asctime)s.%(msecs)03d %(levelname)s {engine} %(message)s", "%Y-%m-%d %H:%M:%S")
    )
    logger.handlers[:] = [handler]
    logger.setLevel(logging.INFO)
    logger.propagate = False


def _fmt(value: object) -> str:
    text = str(value)
    if not text or any(c in text for c in ' ="'):
        return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return text


def log_event(event: str, *, level: int = logging.INFO, **fields: object) -> None:
    """``ts`` is wall time in seconds, so lines can be joined with client histories."""
    parts = [f"event={event}", f"ts={time.time():.6f}"]
    parts += [f"{k}={_fmt(v)}" for k, v in fields.items() if v is not None]
    logger.log(level, " ".join(parts))
