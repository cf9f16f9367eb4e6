"""Waiting on a condition with a deadline: the only way the rig waits (never a bare sleep)."""

from __future__ import annotations

from typing import Callable, TypeVar

import httpx
from tenacity import RetryError, Retrying, retry_if_exception_type, retry_if_result, stop_after_delay, wait_fixed

from chaos.errors import TargetError
from chaos.system.limits import waiting

__all__ = ["HTTP_CALL_S", "PROBE", "STATE_CHANGE_S", "http_ok", "wait_until"]

T = TypeVar("T")

STATE_CHANGE_S = 5.0  # how long a signalled process or container may take to reach its new state
HTTP_CALL_S = 5.0  # one call of the rig's own to a service (a model list, a warm-up request)

_TRANSIENT = (httpx.HTTPError, OSError, ValueError)

# The rig's one client for its repeated calls (readiness polls, probes, warm-ups): httpx.get
# builds a client, TLS context included, per call: 23 ms of CPU and of the GIL each, which
# polled at 20 Hz took half a core from the rig and the engines it watched. No socket is
# kept alive, so each call asks the service that listens now (a restart must be asked anew).
PROBE = httpx.Client(limits=httpx.Limits(max_keepalive_connections=0))


def wait_until(check: Callable[[], T], *, timeout_s: float, what: str, interval_s: float = 0.05) -> T:
    """Poll ``check`` until it returns something truthy; transient errors count as "not yet".

    Raises ``TargetError`` naming ``what`` and the last value or error once ``timeout_s``
    has passed.
    """
    retrying = Retrying(
        stop=stop_after_delay(timeout_s),
        wait=wait_fixed(interval_s),
        retry=retry_if_result(lambda r: not r) | retry_if_exception_type(_TRANSIENT),
    )
    try:
        with waiting(what, timeout_s):
            return retrying(check)
    except RetryError as exc:
        last = exc.last_attempt
        seen = repr(last.exception()) if last.failed else repr(last.result())
        raise TargetError(f"{what}: not true within {timeout_s:g}s (last: {seen})") from None


def http_ok(url: str, *, timeout_s: float = 1.0) -> bool:
    """One bounded GET; True on a 2xx."""
    return PROBE.get(url, timeout=timeout_s).is_success
