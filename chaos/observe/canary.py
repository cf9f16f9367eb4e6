"""The canary: a listener on the stack's port where no service listens (``PortPlan.canary``),
which a hostile request names as its own bootstrap server (``bootstrap_host`` and
``bootstrap_port``). An engine that follows a client's bootstrap fields dials a prefill's
bootstrap server there: every connection the canary accepts is a request reaching an address
the client chose.

Each dial is counted into the history as a counter (source ``canary``, ``dials_total``),
sampled when the canary opens, at each dial and every second (verdicts are judged before a
test's fixtures end), so ``counter_never_rises`` judges it like any failure counter; the
first line a dial sent is kept as a log line of the ``canary`` service, the evidence of
what was asked there. The canary listens on the host's
loopback only; engines in a namespace of the stack's own reach it through the bridge, which
imports the port (``chaos.system.bridge``).
"""

from __future__ import annotations

import ipaddress
import socket
import threading
import time
from types import TracebackType
from urllib.parse import urlsplit

from chaos.errors import ConfigError
from chaos.observe.history import History
from chaos.observe.pipeline import Metric
from chaos.observe.records import LogEvent, Sample

__all__ = ["CANARY", "DIALS", "Canary"]

CANARY = "canary"
DIALS = Metric(CANARY, "dials_total")
_ACCEPT_POLL_S = 0.2  # how often the accept loop looks at its stop flag
_FIRST_LINE_S = 0.5  # how long a dial may take to say what it wants before it is closed
_JOIN_S = 2.0
_SAMPLE_S = 1.0  # the counter sampled at least this often


class Canary:
    """Listens at ``url`` (a loopback address) while inside its ``with`` block."""

    def __init__(self, history: History, url: str) -> None:
        parts = urlsplit(url)
        if parts.hostname is None or parts.port is None or not ipaddress.ip_address(parts.hostname).is_loopback:
            raise ConfigError(f"the canary listens on a loopback address with a port, not {url!r}")
        self.host, self.port = parts.hostname, parts.port
        self.history = history
        self.dials = 0
        self._stop = threading.Event()
        self._sock: socket.socket | None = None
        self._thread: threading.Thread | None = None

    def __enter__(self) -> "Canary":
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.host, self.port))
        sock.listen(16)
        sock.settimeout(_ACCEPT_POLL_S)
        self._sock = sock
        self._count()
        self._thread = threading.Thread(target=self._serve, name="canary", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *_: type[BaseException] | BaseException | TracebackType | None) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(_JOIN_S)
        if self._sock is not None:
            self._sock.close()
        self._count()

    @property
    def address(self) -> tuple[str, int]:
        """What a hostile request names as its bootstrap host and port."""
        return self.host, self.port

    def _count(self) -> None:
        self.history.append(Sample(self.history.now(), CANARY, {DIALS.name: float(self.dials)}))

    def _serve(self) -> None:
        assert self._sock is not None
        sampled = time.monotonic()
        while not self._stop.is_set():
            if time.monotonic() - sampled >= _SAMPLE_S:
                self._count()
                sampled = time.monotonic()
            try:
                conn, peer = self._sock.accept()
            except TimeoutError:
                continue
            except OSError:  # closed under us at the end
                return
            with conn:
                self.dials += 1
                self._count()
                conn.settimeout(_FIRST_LINE_S)
                try:
                    first = conn.recv(512).split(b"\r\n", 1)[0].decode(errors="replace")
                except OSError:
                    first = ""
            said = first or "(nothing within 0.5 s)"
            self.history.append(LogEvent(self.history.now(), CANARY, f"dialled from {peer[0]}:{peer[1]}: {said}"))
