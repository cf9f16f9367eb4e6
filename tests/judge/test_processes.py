"""``chaos.judge.processes``: each service kept its process; histories written by hand."""

from __future__ import annotations

from chaos import verdicts as v
from chaos.observe.history import History
from chaos.observe.records import FaultEvent, Sample, Stage
from chaos.observe.sampler import PROCS

SERVICES = ("prefill", "decode")


def _history(decode_pids: list[float | None]) -> History:
    """Readings every second; the fault begins at 1.5 s; prefill's pid stays 10."""
    h = History()
    h.append(FaultEvent(1.5, 0.0, "client#1", Stage.INJECT, "hostile input"))
    for i, pid in enumerate(decode_pids):
        values = {"pid:prefill": 10.0, "rss_bytes:prefill": 1.0}
        if pid is not None:
            values["pid:decode"] = pid
        h.append(Sample(float(i), PROCS, values))
    return h


def test_a_service_that_kept_its_process_stayed_up():
    judged = v.stayed_up(SERVICES)(_history([20, 20, None, 20, 20]))  # one failed read is not a crash
    assert judged.status is v.Status.PASS and judged.evidence.values["readings"] == 5  # 2 + 3 from 1.5 s on


def test_a_new_pid_is_a_restart_and_a_service_no_longer_read_is_gone():
    restarted = v.stayed_up(SERVICES)(_history([20, 20, 21, 21]))
    assert restarted.status is v.Status.FAIL and "decode restarted +0.50s" in restarted.message
    gone = v.stayed_up(SERVICES)(_history([20, 20, 20, None, None]))
    assert gone.status is v.Status.FAIL and "decode gone +1.50s" in gone.message


def test_no_reading_is_unknown_and_none_after_the_fault_is_not_at_stake():
    assert v.stayed_up(SERVICES)(History()).status is v.Status.UNKNOWN
    h = History()
    h.append(Sample(0.0, PROCS, {"pid:prefill": 10.0, "pid:decode": 20.0}))
    assert v.stayed_up(SERVICES)(h).status is v.Status.NOT_AT_STAKE
