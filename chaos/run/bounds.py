"""Verdict bounds derived from the target's configuration, never written into tests, and
the clients' deadlines the suites build from them (presets named for what they protect)."""

from __future__ import annotations

from dataclasses import dataclass

from chaos.clients.client import Deadlines
from chaos.observe.pipeline import SCHEDULER_PASS_S
from chaos.targets.stack import StackInfo

__all__ = ["Bounds"]


@dataclass(frozen=True)
class Bounds:
    """Seconds. ``slack_s`` is how late a watchdog may fire; ``forward_s`` the longest
    prefill forward of the suites' prompts; ``recovery_s`` how soon service must return;
    ``restart_s`` how long the target may take to bring a killed engine back (a client that
    retries through a restart needs a budget that spans it); decode declares prefill dead
    after ``heartbeat_max_failure`` missed heartbeats, ``heartbeat_interval_s`` apart;
    an engine checks whether the client of a non-streaming request is still there every
    ``disconnect_poll_s`` (a stream's client is missed at the next write)."""

    bootstrap_s: float
    waiting_s: float
    inflight_s: float
    heartbeat_detect_s: float
    heartbeat_interval_s: float
    heartbeat_max_failure: int
    disconnect_poll_s: float
    router_timeout_s: float
    router_max_retries: (
        int  # smg's attempts per request, the first among them (smg 1.13: --retry-max-retries 2 makes 2)
    )
    slack_s: float
    forward_s: float
    recovery_s: float
    restart_s: float
    # smg's health checks (its defaults where unset): every interval, a worker out after
    # failure_threshold failed ones in a row, each failing by its timeout at the latest, and
    # back after success_threshold good ones
    health_interval_s: float = 60.0
    health_failure_threshold: int = 3
    health_success_threshold: int = 2
    health_timeout_s: float = 5.0

    @property
    def quiet_s(self) -> float:
        """How long after the system went quiet a gauge may stay above its baseline: the
        slack plus one scheduler pass."""
        return self.slack_s + SCHEDULER_PASS_S

    @property
    def abort_s(self) -> float:
        """How long an engine may hold a request its client abandoned: until the forward in
        progress ends, plus the slack."""
        return self.slack_s + self.forward_s

    @property
    def abandon_s(self) -> float:
        """How long an engine may hold a non-streaming request whose client hung up: until
        its next check that the client is there, then as long as an abort."""
        return self.disconnect_poll_s + self.abort_s

    @property
    def refuse_s(self) -> float:
        """How long the stack may take to turn away a request it can never serve (a prompt
        over the model's context): as long as a forward takes to read a prompt, plus the
        slack. Past that, the refusal is waiting on something else."""
        return self.slack_s + self.forward_s

    def heartbeat_no_sooner_s(self, each_miss_s: float) -> float:
        """The soonest decode's heartbeat may give a prefill up after it became unreachable:
        ``heartbeat_max_failure`` misses in a row, the wait of an interval between two (SGLang
        floors it at 2 s), each miss taking ``each_miss_s`` to fail (a read timeout behind a
        blackholed link or a frozen prefill, ``chaos.targets.stack.HEARTBEAT_READ_S``; 0 where the
        connection is refused at once). Sooner, it gave up on fewer misses than it is set to."""
        misses = max(self.heartbeat_max_failure, 1)
        return (misses - 1) * max(self.heartbeat_interval_s, 2.0) + misses * each_miss_s

    def drops_worker_s(self, each_check_s: float) -> float:
        """How long after a worker stopped answering the router may still send it requests:
        ``health_failure_threshold`` checks in a row must fail, one an interval, each failing
        after ``each_check_s`` (0 where its connection is refused; up to the check timeout
        where it hangs), plus the slack."""
        misses = max(self.health_failure_threshold, 1)
        return misses * (self.health_interval_s + min(each_check_s, self.health_timeout_s)) + self.slack_s

    @property
    def takes_back_s(self) -> float:
        """How long after a worker is healthy again the router may take to send it requests:
        ``health_success_threshold`` good checks, one an interval, each as long as a forward
        (SGLang's /health generates a token), plus the slack."""
        return max(self.health_success_threshold, 1) * self.health_interval_s + self.forward_s + self.slack_s

    def patient(self, *, stall_s: float | None = None) -> Deadlines:
        """A client that waits as long as the router does (smg's request timeout, for the
        first byte and the whole request), and lets a stream pause up to ``stall_s`` (by
        default that long too): what a scenario uses when the system, not the client, must
        end every request."""
        wait = self.router_timeout_s
        return Deadlines(read_s=wait, stall_s=wait if stall_s is None else stall_s, total_s=wait)

    def through_restart(self, held_s: float = 0.0) -> Deadlines:
        """A patient client whose stream may pause through an engine's restart (the
        recovery bound) and ``held_s`` more (what the scenario holds on top: a pinned room)."""
        return self.patient(stall_s=self.recovery_s + held_s)

    def past_timeout(self, timeout_s: float, *, slacks: int = 1) -> Deadlines:
        """A patient client whose stream may pause until an engine's own timeout
        (``timeout_s``: decode's waiting timeout on a stuck transfer) fails the request,
        with ``slacks`` watchdog slacks on top: it stays until the engine has acted."""
        return self.patient(stall_s=timeout_s + slacks * self.slack_s)

    def impatient(self, *, read_s: float, total_s: float) -> Deadlines:
        """A client that hangs up before its reply (``read_s`` for the first byte, ``total_s``
        in all): the abandoned request is what the scenario judges the engines on."""
        return Deadlines(read_s=read_s, total_s=total_s)

    @classmethod
    def of(cls, info: StackInfo) -> "Bounds":
        c = info.config
        t = c["timeouts"]
        return cls(
            bootstrap_s=float(t["bootstrap_s"]),
            waiting_s=float(t["waiting_s"]),
            inflight_s=float(t["inflight_s"]),
            heartbeat_detect_s=float(t["heartbeat_detect_s"]),
            heartbeat_interval_s=float(t["heartbeat_interval_s"]),
            heartbeat_max_failure=int(t["heartbeat_max_failure"]),
            disconnect_poll_s=float(t["disconnect_poll_s"]),
            router_timeout_s=float(c["router_request_timeout_s"]),
            router_max_retries=int(c.get("router_max_retries", 5)),  # smg's default
            # smg's defaults where the stack does not say (60 s: its check interval)
            health_interval_s=float(c.get("router_health_check_interval_s", 60)),
            health_failure_threshold=int(c.get("router_health_failure_threshold", 3)),
            health_success_threshold=int(c.get("router_health_success_threshold", 2)),
            health_timeout_s=float(c.get("router_health_check_timeout_s", 5)),
            slack_s=float(c.get("slack_s", 1.5)),
            forward_s=float(c.get("forward_s", 2.0)),
            recovery_s=float(c.get("recovery_s", 10.0)),
            restart_s=float(c.get("restart_s", 5.0)),
        )
