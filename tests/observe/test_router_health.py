"""The steady state waits out smg's failed health checks: the logic on pages served in turn
by a small fake (the live case, a check that fails after a freeze's thaw, is
tests/doctor/test_doctor.py's frozen decode followed by any test on its stack)."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Iterator

import pytest

from chaos.errors import TargetError
from chaos.observe.router_health import close_breakers, read_health_checks, unclosed_breakers, wait_out_failed_checks


def page(*, decode_ok: int, decode_failed: int, decode_healthy: int = 1) -> str:
    """smg 1.13's health metrics as its /metrics page shows them."""
    return f"""# HELP smg_worker_health Worker health status (1=healthy, 0=unhealthy)
# TYPE smg_worker_health gauge
smg_worker_health{{worker="http://127.0.0.1:1004"}} 1
smg_worker_health{{worker="http://127.0.0.1:1009"}} {decode_healthy}
# HELP smg_worker_health_checks_total Health check results by worker_type and result
# TYPE smg_worker_health_checks_total counter
smg_worker_health_checks_total{{worker_type="decode",result="success"}} {decode_ok}
smg_worker_health_checks_total{{worker_type="decode",result="failure"}} {decode_failed}
smg_worker_health_checks_total{{worker_type="prefill",result="success"}} 9
"""


class Pages:
    """Serves ``pages`` one per request, the last one from then on."""

    def __init__(self, pages: list[str]) -> None:
        self.pages, self.served = list(pages), 0

    def next(self) -> str:
        text = self.pages[min(self.served, len(self.pages) - 1)]
        self.served += 1
        return text


@pytest.fixture
def router() -> Iterator[tuple[str, Pages]]:
    pages = Pages([""])

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = pages.next().encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/metrics", pages
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def test_a_page_without_smgs_health_checks_reads_as_unknown(router):
    url, pages = router
    pages.pages = ["# a router that is not smg\nrequests_total 3\n"]
    assert read_health_checks(url) is None
    wait_out_failed_checks(url, timeout_s=1)  # one read, nothing to wait for
    assert pages.served == 2


def test_failed_checks_are_waited_out_until_one_passes_after_them(router):
    """The case from CI: two failed checks of a frozen decode, the third lands after the
    thaw (decode unhealthy), then one passes and decode is healthy again."""
    url, pages = router
    pages.pages = [
        page(decode_ok=5, decode_failed=2),  # the first read: 2 failures, never seen before
        page(decode_ok=5, decode_failed=3, decode_healthy=0),  # the check in flight fails
        page(decode_ok=6, decode_failed=3, decode_healthy=0),  # passed, not yet healthy
        page(decode_ok=7, decode_failed=3),  # healthy again
    ]
    wait_out_failed_checks(url, timeout_s=5)
    assert pages.served == 4
    pages.pages, pages.served = [page(decode_ok=9, decode_failed=3)], 0
    wait_out_failed_checks(url, timeout_s=5)  # nothing failed since: one read, no wait
    assert pages.served == 1


def test_a_router_that_never_passes_a_check_again_is_a_target_error(router):
    url, pages = router
    pages.pages = [page(decode_ok=1, decode_failed=4, decode_healthy=0)]
    with pytest.raises(TargetError, match="decode health check passed"):
        wait_out_failed_checks(url, timeout_s=0.5)


def breakers(prefill: int, decode: int = 0) -> str:
    """smg 1.13's breaker gauges (0 closed, 1 open, 2 half-open) as its /metrics page shows them."""
    return f"""# TYPE smg_worker_cb_state gauge
smg_worker_cb_state{{worker="http://127.0.0.1:1004"}} {prefill}
smg_worker_cb_state{{worker="http://127.0.0.1:1009"}} {decode}
"""


def test_a_half_open_breaker_is_probed_until_it_closes(router):
    """What a kv_link test left: prefill's breaker half-open. Probes go out while it is not
    closed (successes are what close it), none once it is."""
    url, pages = router
    pages.pages = [breakers(2), breakers(2), breakers(0)]
    probes: list[int] = []
    close_breakers(url, lambda: probes.append(1), timeout_s=5)
    assert len(probes) == 2 and pages.served == 3
    assert unclosed_breakers(url) == {}
    pages.pages, pages.served = [breakers(1, 2)], 0
    assert unclosed_breakers(url) == {"http://127.0.0.1:1004": "open", "http://127.0.0.1:1009": "half-open"}


def test_a_breaker_that_never_closes_is_a_target_error(router):
    url, pages = router
    pages.pages = [breakers(1)]
    with pytest.raises(TargetError, match="every smg circuit breaker closed"):
        close_breakers(url, lambda: None, timeout_s=0.5)
