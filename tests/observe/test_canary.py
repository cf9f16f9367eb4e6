"""The canary counts every dial to the address a hostile client chose, so the verdict on it
can fail (``chaos.observe.canary``); real sockets on the loopback."""

from __future__ import annotations

import socket

import pytest
from tenacity import Retrying, stop_after_delay, wait_fixed

from chaos import verdicts as v
from chaos.errors import ConfigError
from chaos.observe.canary import DIALS, Canary
from chaos.observe.history import History
from chaos.observe.records import Invoke, LogEvent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("dialled", [False, True])
def test_a_dial_to_the_canary_fails_the_verdict_on_it(dialled):
    h = History()
    check = v.counter_never_rises(DIALS, why="no request reaches an address its client chose")
    with Canary(h, f"http://127.0.0.1:{_free_port()}") as canary:
        h.append(Invoke(h.now(), 0.0, "op1", "/v1/chat/completions", False))  # what was at stake
        if dialled:  # as an engine that followed the client's bootstrap fields would
            with socket.create_connection(canary.address, timeout=2) as s:
                s.sendall(b"GET /route?prefill_dp_rank=-1 HTTP/1.1\r\n\r\n")
            for attempt in Retrying(stop=stop_after_delay(5), wait=wait_fixed(0.05), reraise=True):
                with attempt:
                    assert canary.dials == 1
    judged = check(h)
    if not dialled:
        assert judged.status is v.Status.PASS, judged
        return
    assert judged.status is v.Status.FAIL and judged.evidence.values["rises"] == 1, judged
    (said,) = [e for e in h.of(LogEvent) if e.service == "canary"]
    assert "GET /route?prefill_dp_rank=-1 HTTP/1.1" in said.line


def test_the_canary_listens_on_the_loopback_only():
    with pytest.raises(ConfigError, match="loopback"):
        Canary(History(), "http://10.0.0.1:30014")
