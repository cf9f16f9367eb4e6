"""Verdict bounds derived from the target's configuration, never written into tests."""

from __future__ import annotations

from dataclasses import dataclass

from chaos.stack import StackInfo

__all__ = ["Bounds"]


@dataclass(frozen=True)
class Bounds:
    """Seconds. ``slack_s`` is how late a watchdog may fire; ``forward_s`` the longest
    prefill forward of the suites' prompts; ``recovery_s`` how soon service must return;
    ``restart_s`` how long the target may take to bring a killed engine back (a client that
    retries through a restart needs a budget that spans it)."""

    bootstrap_s: float
    waiting_s: float
    inflight_s: float
    heartbeat_detect_s: float
    router_timeout_s: float
    slack_s: float
    forward_s: float
    recovery_s: float
    restart_s: float

    @classmethod
    def of(cls, info: StackInfo) -> "Bounds":
        c = info.config
        t = c["timeouts"]
        return cls(
            bootstrap_s=float(t["bootstrap_s"]),
            waiting_s=float(t["waiting_s"]),
            inflight_s=float(t["inflight_s"]),
            heartbeat_detect_s=float(t["heartbeat_detect_s"]),
            router_timeout_s=float(c["router_request_timeout_s"]),
            slack_s=float(c.get("slack_s", 1.5)),
            forward_s=float(c.get("forward_s", 2.0)),
            recovery_s=float(c.get("recovery_s", 10.0)),
            restart_s=float(c.get("restart_s", 5.0)),
        )
