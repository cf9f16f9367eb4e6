"""``pdchaos doctor`` names where requests are stuck: three live situations on the embedded
stack (the issue's "done when"), the CLI, and the pure hop logic on crafted series.

The live tests take the ``workload`` fixture for its steady-state probe: the stack must
serve a request before each one (a frozen decode opens smg's circuit breakers for a while)."""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path
from typing import Iterator

import httpx
import pytest

from chaos.doctor import run_doctor, write_report
from chaos.doctor.hops import BEFORE_ROUTER, HOPS, NO_PROBLEM, coarse_pinned_share, diagnose, hop_stats
from chaos.system.procs import run

PDCHAOS = str(Path(sys.executable).parent / "pdchaos")
WINDOW_S = 4.0


class Clients:
    """Requests from background threads, each with its own (bounded) timeout: the users
    whose requests doctor looks for. ``loop`` keeps one user sending back to back."""

    def __init__(self, url: str, *, timeout_s: float, words: int = 20, max_tokens: int = 4) -> None:
        self.url, self.timeout_s = url + "/generate", timeout_s
        self.body = {"text": " ".join(f"w{i}" for i in range(words)), "sampling_params": {"max_new_tokens": max_tokens}}
        self.stop = threading.Event()
        self.threads: list[threading.Thread] = []
        self.codes: list[int | str] = []

    def _one(self) -> None:
        try:
            self.codes.append(httpx.post(self.url, json=self.body, timeout=self.timeout_s).status_code)
        except httpx.HTTPError as exc:
            self.codes.append(type(exc).__name__)

    def send(self, n: int) -> "Clients":
        for _ in range(n):
            t = threading.Thread(target=self._one, daemon=True)
            t.start()
            self.threads.append(t)
        return self

    def loop(self, *, max_requests: int = 200) -> "Clients":
        def run() -> None:
            for _ in range(max_requests):
                if self.stop.is_set():
                    return
                self._one()

        t = threading.Thread(target=run, daemon=True)
        t.start()
        self.threads.append(t)
        return self

    def join(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(timeout=self.timeout_s + 5)


@pytest.fixture
def clients(stack) -> Iterator[type[Clients]]:
    made: list[Clients] = []

    def make(**kw) -> Clients:
        c = Clients(stack.info.endpoints["client"], **kw)
        made.append(c)
        return c

    yield make  # type: ignore[misc]
    for c in made:
        c.join()


def _wait_for(predicate, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.05)


def test_wedged_proxy_before_the_router(stack, workload, faults, clients, tmp_path):
    """Clients wait behind a blackholed client_router proxy: router and engines idle, a
    probe straight to the router succeeds, one through the clients' path does not."""
    with faults.blackhole("client_router", stream="upstream"):
        waiting = clients(timeout_s=WINDOW_S + 8).send(4)  # still waiting when the window and both probes (~5 s) end
        report = run_doctor(stack, window_s=WINDOW_S, probe=True)
    waiting.join()
    d = report.diagnosis
    assert d.location == BEFORE_ROUTER and d.state == "stuck", d.line()
    assert report.probes["router"]["ok"] and not report.probes["client"]["ok"]
    assert all(s.shape == "idle" for s in report.stats), [s.to_json() for s in report.stats]
    folder = write_report(report, tmp_path)
    saved = json.loads((folder / "doctor.json").read_text())
    assert saved["diagnosis"]["location"] == BEFORE_ROUTER and (folder / "timeline.png").stat().st_size > 0


def test_frozen_decode(stack, workload, faults, clients):
    """Decode frozen with requests on it: it does not answer, the router holds requests,
    and doctor names decode as stuck."""
    with faults.freeze("decode"):
        waiting = clients(timeout_s=WINDOW_S + 8).send(3)
        _wait_for(lambda: "router" in _open_router(stack))
        report = run_doctor(stack, window_s=WINDOW_S, probe=True)
    waiting.join()
    d = report.diagnosis
    assert d.location.startswith("decode") and d.state.startswith("stuck"), d.line()
    assert "decode" in report.unreachable
    router = next(s for s in report.stats if s.hop == "router")
    assert router.max and router.max > 0, router.to_json()
    assert not report.probes["router"]["ok"]  # the server is wedged for new traffic too


def _open_router(stack) -> dict[str, list[str]]:
    from chaos.doctor.openreqs import open_requests

    return open_requests({"router": stack.logs("router")}, time.time() - 60)


def test_rotating_load_is_no_problem_even_if_a_slow_sampler_reads_it_pinned(stack, workload, faults, clients):
    """One user sends back to back over a slowed KV link: prefill's inflight queue is busy
    most of the time and empties between requests. At 20 Hz doctor sees it return to 0
    and its counters move: no problem. A 3 s sampler would have read it pinned."""
    with faults.bandwidth("kv", 300, stream="upstream"):  # ~300 KB of KV per request: ~1 s in flight
        user = clients(timeout_s=20, words=250, max_tokens=2).loop()
        _wait_for(lambda: len(user.codes) >= 1, timeout_s=15)
        report = run_doctor(stack, window_s=WINDOW_S + 3, probe=True)
        user.join()
    assert report.diagnosis.location == NO_PROBLEM, report.diagnosis.line()
    inflight = next(s for s in report.stats if s.hop == "prefill inflight")
    assert inflight.shape == "rotating" and inflight.min == 0, inflight.to_json()
    assert inflight.max is not None and inflight.max >= 1, inflight.to_json()
    assert inflight.progress > 0
    assert inflight.coarse_pinned_share and inflight.coarse_pinned_share > 0, inflight.to_json()
    assert set(user.codes) == {200}, user.codes


def test_cli_prints_the_diagnosis_and_writes_reports(stack, tmp_path):
    state = Path(stack.info.state_dir)
    r = run(
        [PDCHAOS, "--state-dir", str(state), "doctor", "--window", "1", "--probe", "--reports-dir", str(tmp_path)],
        timeout_s=60,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "diagnosis: no problem found" in r.stdout and "prefill inflight" in r.stdout
    assert list(tmp_path.glob("doctor-*/doctor.json")) and list(tmp_path.glob("doctor-*/timeline.png"))
    bad = run([PDCHAOS, "--state-dir", str(state), "doctor", "--logs-since", "yesterday"], timeout_s=30)
    assert bad.returncode == 1 and "--logs-since 'yesterday'" in bad.stderr


# ---- the hop logic on crafted series --------------------------------------------------------
HOP = {h.name: h for h in HOPS}


def _series(values: list[float], dt: float = 0.05) -> list[tuple[float, float]]:
    return [(i * dt, v) for i, v in enumerate(values)]


def test_pinned_with_flat_progress_is_stuck_and_moving_progress_is_slow():
    gauge = _series([2.0] * 100)
    stuck = hop_stats(HOP["prefill inflight"], gauge, {"num_requests_total": _series([5.0] * 100)})
    slow = hop_stats(
        HOP["prefill inflight"], gauge, {"num_requests_total": _series([float(i // 10) for i in range(100)])}
    )
    assert (stuck.shape, stuck.verdict) == ("pinned", "stuck")
    assert (slow.shape, slow.verdict) == ("pinned", "slow")
    d = diagnose(
        [stuck, hop_stats(HOP["router"], _series([2.0] * 100), {})], unreachable={}, probes={}, open_requests={}
    )
    assert (d.location, d.state) == ("prefill inflight", "stuck")


def test_a_slow_sampler_reads_rotating_load_as_pinned():
    # busy 0.9 s, empty 0.15 s, over 12 s: rotating at 20 Hz
    values = [0.0 if (i * 0.05) % 1.05 >= 0.9 else 1.0 for i in range(240)]
    st = hop_stats(
        HOP["prefill inflight"], _series(values), {"num_requests_total": _series(list(map(float, range(240))))}
    )
    assert st.shape == "rotating" and st.verdict == "flowing"
    assert 0 < (st.coarse_pinned_share or 0) < 1
    assert coarse_pinned_share(_series([1.0] * 10)) is None  # shorter than one 3 s period


def test_router_holding_while_engines_idle_is_the_router():
    stats = [hop_stats(h, _series([2.0 if h.name == "router" else 0.0] * 80), {}) for h in HOPS]
    d = diagnose(stats, unreachable={}, probes={}, open_requests={})
    assert d.location == "router" and "every engine hop stayed at 0" in d.evidence[0]


def test_open_requests_from_real_sglang_logs():
    """SGLang 0.5.23's --log-requests lines (as logged by the sglang-cpu target): a request
    is open from its Receive: line to its Finish: line; health checks are not requests; a
    server start forgets what the old process held."""
    from chaos.doctor.openreqs import open_requests

    def line(kind: str, rid: str) -> str:
        return f"[2026-12-01 03:13:13] {kind}: obj=GenerateReqInput(rid='{rid}', session_id=None, mm_hashes=None)"

    old = "\n".join([line("Receive", "lost-in-the-crash")])
    restarted = "[2026-12-01 03:13:13] server_args={'model_path': '/m', 'disaggregation_mode': 'decode'}"
    text = "\n".join(
        [
            old,
            restarted,
            line("Receive", "HEALTH_CHECK_1"),
            line("Receive", "a1"),
            line("Receive", "b2"),
            line("Finish", "a1"),
        ]
    )
    assert open_requests({"decode": text, "prefill": line("Receive", "p1")}, since=0) == {
        "decode, stage not logged": ["b2"],
        "prefill, stage not logged": ["p1"],
    }
