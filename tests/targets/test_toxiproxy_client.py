"""The Toxiproxy client against the real server, and its timeouts against a silent one."""

from __future__ import annotations

import socket
import threading
import time

import httpx
import pytest

from chaos.errors import ProxyExists, ProxyNotFound, ToxiproxyError
from chaos.targets.toxiproxy import Toxic, ToxiproxyClient


def test_crud_against_the_real_server(stack):
    with stack.toxiproxy() as tp:
        assert tp.version()
        assert set(tp.proxies()) >= {"client_router", "bootstrap", "control", "kv"}
        tp.create("scratch", listen="127.0.0.1:0", upstream=stack.info.proxies["kv"]["upstream"])
        try:
            with pytest.raises(ProxyExists):
                tp.create("scratch", listen="127.0.0.1:0", upstream="127.0.0.1:1")
            added = tp.add_toxic("scratch", Toxic("lat", "latency", attributes={"latency": 100, "jitter": 0}))
            assert added.attributes["latency"] == 100
            assert tp.update_toxic("scratch", "lat", attributes={"latency": 250}).attributes["latency"] == 250
            assert [t.name for t in tp.toxics("scratch")] == ["lat"]
            assert tp.disable("scratch").enabled is False
            tp.reset()
            assert tp.get("scratch").enabled is True and tp.toxics("scratch") == []
        finally:
            tp.delete("scratch")
        with pytest.raises(ProxyNotFound):
            tp.get("scratch")


@pytest.fixture
def silent_server():
    """Accepts connections and never answers: a hung Toxiproxy API."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(16)
    conns: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        srv.settimeout(0.1)
        while not stop.is_set():
            try:
                conns.append(srv.accept()[0])
            except OSError:
                continue

    th = threading.Thread(target=accept, daemon=True)
    th.start()
    yield f"http://127.0.0.1:{srv.getsockname()[1]}"
    stop.set()
    th.join(timeout=2)
    for c in conns:
        c.close()
    srv.close()


def test_every_call_times_out_against_a_silent_server(silent_server):
    client = ToxiproxyClient(silent_server, timeout=httpx.Timeout(0.5, connect=0.5))
    calls = [
        client.version,
        client.proxies,
        lambda: client.create("p", listen="127.0.0.1:0", upstream="127.0.0.1:1"),
        lambda: client.add_toxic("p", Toxic("t", "timeout", attributes={"timeout": 0})),
        lambda: client.remove_toxic("p", "t"),
        lambda: client.disable("p"),
        client.reset,
    ]
    for call in calls:
        t0 = time.monotonic()
        with pytest.raises(ToxiproxyError, match=r"ReadTimeout|did not answer"):
            call()
        assert time.monotonic() - t0 < 2.0
    client.close()
