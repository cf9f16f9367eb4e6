"""Fixtures of the project's own tests (the rig's are in ``chaos.run.fixtures``)."""

from __future__ import annotations

import contextlib
import socket
import threading
from typing import Iterator

import pytest

from chaos.run.fixtures import ensure_steady


@pytest.fixture(autouse=True)
def _steady_shared_stack(request: pytest.FixtureRequest) -> None:
    """A test on its worker's shared stack starts from a steady state whatever ran before
    it there: tests run in another order on each worker, so none may inherit another's
    aftermath (a circuit a fault opened closes within the breaker's timeout). The
    ``workload`` fixture does the same for the tests that use it."""
    if "stack" in request.fixturenames and "workload" not in request.fixturenames:
        ensure_steady(request.getfixturevalue("stack"))


@pytest.fixture
def silent_server() -> Iterator[str]:
    """The URL of a server that accepts a connection and never says a word (the seed
    incident's proxy): a client's deadline is all that ends a request to it."""
    held: list[socket.socket] = []
    done = threading.Event()
    with socket.create_server(("127.0.0.1", 0)) as server:
        server.settimeout(5)

        def accept() -> None:
            with contextlib.suppress(OSError):
                held.append(server.accept()[0])
            done.wait(10)  # hold the connection, say nothing

        t = threading.Thread(target=accept, daemon=True)
        t.start()
        try:
            yield f"http://127.0.0.1:{server.getsockname()[1]}"
        finally:
            done.set()
            t.join(timeout=5)
            for c in held:
                c.close()
