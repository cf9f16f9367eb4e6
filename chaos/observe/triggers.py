"""Triggers: fire a fault when a condition holds, never after a sleep.

    gauge("decode", "num_decode_transfer_queue_reqs") > 0      # a metric condition
    log_line(stack, "decode", r"state=transfer_queue")           # a log line appears
    bytes_crossed("kv") >= 100_000                               # N bytes crossed a link

Every wait has a deadline; if the condition never holds, ``TriggerTimeout`` names the
signal and the last value seen. The firing is recorded in the history.
"""

from __future__ import annotations

import operator
import re
from dataclasses import dataclass
from typing import Callable, Iterable, Protocol

from chaos.errors import TriggerTimeout
from chaos.observe.history import History
from chaos.observe.logs import parse_engine_line, strip_ansi
from chaos.observe.records import Outcome, Phase, TriggerFired
from chaos.observe.sampler import Sampler

__all__ = [
    "Condition",
    "Signal",
    "bytes_crossed",
    "gauge",
    "log_line",
    "poll_for",
    "quiet",
    "received",
    "requests_done",
    "requests_failed",
    "requests_sent",
    "streams_begun",
    "wait_for",
]


@dataclass(frozen=True)
class Condition:
    """Something that holds or not, with a description and the value it last saw."""

    describe: str
    check: Callable[[Sampler, float], tuple[bool, str]]  # (sampler, armed_at) -> (holds, value)

    def __and__(self, other: "Condition") -> "Condition":
        """Both hold at the same look."""

        def check(sampler: Sampler, since: float) -> tuple[bool, str]:
            (a, seen_a), (b, seen_b) = self.check(sampler, since), other.check(sampler, since)
            return a and b, f"{seen_a}; {seen_b}"

        return Condition(f"{self.describe} and {other.describe}", check)

    def __or__(self, other: "Condition") -> "Condition":
        """Either holds at the same look."""

        def check(sampler: Sampler, since: float) -> tuple[bool, str]:
            (a, seen_a), (b, seen_b) = self.check(sampler, since), other.check(sampler, since)
            return a or b, f"{seen_a}; {seen_b}"

        return Condition(f"({self.describe} or {other.describe})", check)


@dataclass(frozen=True)
class Signal:
    """A number read from the latest sample of one source; compare it to get a Condition."""

    source: str
    metric: str

    def read(self, sampler: Sampler, since: float = float("-inf")) -> float | None:
        """The latest value, from a sample taken at history time ``since`` or later only:
        a sample from before the trigger was armed must not fire it."""
        s = sampler.latest(self.source)
        return None if s is None or s.t < since else s.values.get(self.metric)

    def _cond(self, op: Callable[[float, float], bool], sym: str, value: float) -> Condition:
        def check(sampler: Sampler, since: float) -> tuple[bool, str]:
            v = self.read(sampler, since)
            return (v is not None and op(v, value)), repr(v)

        return Condition(f"{self.source}:{self.metric} {sym} {value:g}", check)

    def __gt__(self, value: float) -> Condition:
        return self._cond(operator.gt, ">", value)

    def __ge__(self, value: float) -> Condition:
        return self._cond(operator.ge, ">=", value)

    def __lt__(self, value: float) -> Condition:
        return self._cond(operator.lt, "<", value)

    def __le__(self, value: float) -> Condition:
        return self._cond(operator.le, "<=", value)


class LogReader(Protocol):
    """What a log condition reads: a service's log so far (every target has it)."""

    def logs(self, service: str) -> str: ...


def gauge(source: str, metric: str) -> Signal:
    return Signal(source, metric)


def quiet(gauges: Iterable[tuple[str, str]]) -> Condition:
    """Holds once every gauge reads 0 in a sample taken after arming (a missing gauge is
    not quiet): a fault's ``until``, heal once what it held has been let go."""
    gauges = list(gauges)

    def check(sampler: Sampler, since: float) -> tuple[bool, str]:
        return sampler.is_quiet(gauges, since=since), ""

    return Condition("quiet: " + ", ".join(f"{s}:{m}" for s, m in gauges), check)


def bytes_crossed(proxy: str, direction: str = "upstream") -> Signal:
    """Bytes Toxiproxy forwarded on a link, ``upstream`` being client to server (the
    stack starts Toxiproxy with ``-proxy-metrics``)."""
    return Signal("toxiproxy", f"toxiproxy_proxy_sent_bytes_total:{proxy}:{direction}")


def log_line(target: LogReader, service: str, pattern: str) -> Condition:
    """Holds once a line matching ``pattern`` appears in the service's log after this call."""
    regex = re.compile(pattern)
    start = len(target.logs(service))

    def check(_: Sampler, __: float) -> tuple[bool, str]:
        for line in target.logs(service)[start:].splitlines():
            line = strip_ansi(line)  # smg colours its log's fields whatever NO_COLOR says
            if regex.search(line):
                return True, line
        return False, "no matching line"

    return Condition(f"log line /{pattern}/ in {service}", check)


def requests_sent(history: History, n: int, *, phase: Phase | None = None) -> Condition:
    """Holds once ``n`` requests (of ``phase``) have been sent: a load's clients have all
    started, whatever their threads' start-up took."""

    def check(_: Sampler, __: float) -> tuple[bool, str]:
        sent = len(history.ops(phase=phase))
        return sent >= n, f"{sent} sent"

    return Condition(f"{n} requests sent" + (f" in phase {phase}" if phase else ""), check)


def streams_begun(history: History, n: int = 1) -> Condition:
    """Holds once ``n`` streams have received bytes and are still open: a fault then strikes
    mid-stream, where a request can no longer be retried behind the client's back."""

    def check(_: Sampler, __: float) -> tuple[bool, str]:
        begun = sum(1 for o in history.ops() if o.complete is None and o.chunks)
        return begun >= n, f"{begun} streaming"

    return Condition(f"{n} streams begun", check)


def streaming_through(history: History, service: str, log: Callable[[], str], since: int) -> Condition:
    """Holds while a stream ``service`` received (its log, read from ``since``, names the op)
    has bytes and is still open: with two engines of a kind, a fault then strikes while
    that engine, and not only its twin, has a request in flight. Each check reads the lines
    written since the last one and keeps the ops they named."""
    read, named = [since], set()

    def check(_: Sampler, __: float) -> tuple[bool, str]:
        text = log()
        start = read[0] if len(text) >= read[0] else 0  # a log that shrank was rotated
        read[0] = max(start, text.rfind("\n", start) + 1)
        for line in text[start : read[0]].splitlines():
            fields = parse_engine_line(line)
            if fields.get("event") == "req" and fields.get("xrid"):
                named.add(fields["xrid"])
        open_ = [o.invoke.op for o in history.ops() if o.invoke.op in named and o.complete is None and o.chunks]
        return bool(open_), f"{service} streaming {', '.join(open_[:3])}" if open_ else f"no stream open on {service}"

    return Condition(f"a stream open on {service}", check)


def received(history: History, service: str, log: Callable[[], str], since: int) -> Condition:
    """Holds once ``service``'s log, read from ``since``, says it received one of this test's
    requests (pdsim's first line of a request, SGLang's ``Receive:``, each naming the op). A
    gauge read at the sampler's 10 Hz misses an engine that holds a short prompt for a few
    milliseconds, as prefill does; a log line is never missed. Each check reads on from the
    last complete line the one before it read (a line still being written is read again):
    a request is in the history before it is sent, so no line about it comes before its op
    is known."""

    read = [since]  # how far the log has been scanned
    seen: list[str] = []  # the request it received: once it has, the condition holds for good

    def check(_: Sampler, __: float) -> tuple[bool, str]:
        if seen:  # a line read once is not read again: under `&`, the others may hold later
            return True, f"{service} received {seen[0]}"
        text = log()
        start = read[0] if len(text) >= read[0] else 0  # a log that shrank was rotated
        read[0] = max(start, text.rfind("\n", start) + 1)
        ops = {o.invoke.op for o in history.ops()}
        for line in text[start:].splitlines():
            fields = parse_engine_line(line)
            if fields.get("event") == "req" and fields.get("xrid") in ops:
                seen.append(fields["xrid"])
                return True, f"{service} received {fields['xrid']}"
        return False, f"{service} logged no request of this test"

    return Condition(f"{service} received a request", check)


def _requests_ended(history: History, n: int, phase: Phase | None, *, ok: bool, what: str) -> Condition:
    """Holds once ``n`` requests (of ``phase``) have ended, in success (``ok``) or not."""

    def check(_: Sampler, __: float) -> tuple[bool, str]:
        ended = sum(1 for o in history.ops(phase=phase) if o.outcome is not None and (o.outcome is Outcome.OK) is ok)
        return ended >= n, f"{ended} {what}"

    return Condition(f"{n} requests {what}" + (f" in phase {phase}" if phase else ""), check)


def requests_done(history: History, n: int, *, phase: Phase | None = None) -> Condition:
    """Holds once ``n`` requests (of ``phase``) have completed successfully: "between rounds"."""
    return _requests_ended(history, n, phase, ok=True, what="done")


def requests_failed(history: History, n: int = 1, *, phase: Phase | None = None) -> Condition:
    """Holds once ``n`` requests (of ``phase``) have ended in anything but success: a fault
    a client has seen, not only one the router retried behind its back."""
    return _requests_ended(history, n, phase, ok=False, what="failed")


def poll_for(
    cond: Condition, sampler: Sampler, history: History, *, deadline_s: float, label: str = ""
) -> tuple[bool, str]:
    """Wait until ``cond`` holds or ``deadline_s`` passes: (held, the value last seen). A
    firing is recorded in the history, named ``label`` (default: the condition)."""
    seen = ["never sampled"]
    armed = history.now()

    def holds() -> bool:
        ok, value = cond.check(sampler, armed)
        seen[0] = value
        return ok

    held = sampler.poll(holds, timeout_s=deadline_s, what=f"trigger: {label or cond.describe}")
    if held:
        history.append(TriggerFired(history.now(), label or cond.describe, seen[0]))
    return held, seen[0]


def wait_for(cond: Condition, sampler: Sampler, history: History, *, deadline_s: float) -> str:
    """Block until ``cond`` holds; record and return the value that made it fire."""
    held, value = poll_for(cond, sampler, history, deadline_s=deadline_s)
    if not held:
        raise TriggerTimeout(f"trigger '{cond.describe}' did not fire within {deadline_s:g}s (last value: {value})")
    return value
