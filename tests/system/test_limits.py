"""A test's time limit comes from its own waits (``chaos.system.limits``): a base for the rig's own
work, plus the time spent inside bounded waits; past it, a rig error that names the phase,
what the rig was doing and what it waited for."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import pytest

from chaos.errors import TargetError, TimeLimitHit
from chaos.system.limits import PhaseLimit, activity, waiting
from chaos.system.procs import run
from chaos.system.tools import REPO_ROOT
from chaos.system.wait import wait_until


def _hang(seconds: float) -> None:
    threading.Event().wait(seconds)  # a call without a deadline of its own, as a rig defect would make


@pytest.fixture
def limit():
    """A limit armed with a tiny base, disarmed whatever happens (our own replaces the test's)."""
    armed: list[PhaseLimit] = []

    def arm(base_s: float) -> PhaseLimit:
        lim = PhaseLimit("call of a test", base_s=base_s).arm()
        armed.append(lim)
        return lim

    yield arm
    for lim in armed:
        lim.disarm()


@pytest.mark.timeout(20, method="thread")  # arms limits of its own: pytest-timeout guards it, off SIGALRM
def test_work_outside_any_wait_is_limited_by_the_base(limit):
    limit(0.3)
    with pytest.raises(
        TimeLimitHit, match=r"call of a test after 0\.[3-9]\d*s .*the rig's own work, outside any bounded wait"
    ):
        _hang(10)


@pytest.mark.timeout(20, method="thread")
def test_a_bounded_wait_gets_its_own_deadline_on_top_of_the_base(limit):
    limit(0.3)
    # the wait's 1 s deadline outlasts the base: the wait's own error, not the limit, ends it
    with pytest.raises(TargetError, match="never: not true within 1s"):
        wait_until(lambda: False, timeout_s=1.0, what="never")
    _hang(0.1)  # and the base is still there for the rig's work after it


@pytest.mark.timeout(20, method="thread")
def test_a_wait_past_its_own_deadline_is_named_with_what_it_serves(limit):
    limit(0.2)
    with (
        pytest.raises(TimeLimitHit) as hit,
        activity("heal kv#1 bandwidth(rate=1) on kv upstream"),
        waiting("Toxiproxy to remove the toxic", 0.3),
    ):
        _hang(10)
    text = str(hit.value)
    assert "heal kv#1 bandwidth(rate=1) on kv upstream > Toxiproxy to remove the toxic (waited 0." in text, text
    assert "of its 0.3s" in text, text


@pytest.mark.timeout(20, method="thread")
def test_background_waits_are_named_not_counted(limit):
    limit(0.3)
    release = threading.Event()

    def agent() -> None:
        with waiting("decode restarted between rounds", 60):
            release.wait(10)

    t = threading.Thread(target=agent, name="agent0", daemon=True)
    t.start()
    try:
        with pytest.raises(TimeLimitHit, match="meanwhile agent0: decode restarted between rounds"):
            _hang(10)  # the agent's 60 s gave the main thread nothing
    finally:
        release.set()
        t.join(5)


@pytest.mark.timeout(20, method="thread")
def test_nested_waits_count_once(limit):
    lim = limit(5.0)
    with waiting("outer", 0.5), waiting("inner", 100):
        pass
    assert lim.waited_s < 0.5  # the inner wait's 100 s never extended the limit


HANGING = """
import threading

from chaos.system.wait import wait_until


def test_hangs_outside_a_wait():
    threading.Event().wait(30)


def test_waits_within_its_deadline():
    wait_until(lambda: False, timeout_s=1.5, what="a condition that never holds")
"""


def test_a_hung_test_is_a_rig_error_that_says_where(tmp_path: Path):
    """Through pytest: no --timeout given, so the plugin's limit times the test; a hang is an
    error (not a failed verdict) whose message names the phase; a long bounded wait is not
    cut short by the base."""
    (tmp_path / "test_hang.py").write_text(HANGING)
    (tmp_path / "conftest.py").write_text('pytest_plugins = ["chaos.run.plugin"]\n')
    (tmp_path / "pytest.ini").write_text("[pytest]\npdchaos_limit_base_s = 1\n")
    done = run(
        [sys.executable, "-m", "pytest", str(tmp_path), "-q", "-p", "no:cacheprovider", "-p", "no:xdist", "--rootdir", str(tmp_path), "--reports-dir", str(tmp_path / "reports")],
        cwd=REPO_ROOT, timeout_s=120,
    )  # fmt: skip
    out = done.stdout
    assert "TimeLimitHit: test limit hit in the call of test_hang.py::test_hangs_outside_a_wait" in out, out[-3000:]
    assert "the rig's own work, outside any bounded wait" in out, out[-3000:]
    # the 1.5 s wait outlasted the 1 s base: its own deadline ended it, as a TargetError
    assert "TargetError: a condition that never holds: not true within 1.5s" in out, out[-3000:]
    assert "2 errors" in out.splitlines()[-1], out[-3000:]
