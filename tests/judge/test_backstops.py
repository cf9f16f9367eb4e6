"""``chaos.judge.backstops``: each check passes on a good history and fails (or is unknown) on
a crafted bad one, histories written by hand."""

from __future__ import annotations

import pytest

from chaos import verdicts as v
from chaos.observe.history import History
from chaos.observe.logs import backstop_of, parse_engine_line
from chaos.observe.records import Complete, Invoke, LogEvent, Outcome
from tests.judge.histories import PDSIM_WAITING, op, status

_SGLANG_BOOTSTRAP = (
    "[2026-12-04 15:48:50] Finish: obj=GenerateReqInput(rid='bc84', routing_key='a'), out={'meta_info': "
    "{'finish_reason': {'type': 'abort', 'message': \"Prefill bootstrap failed for request rank=0 "
    "req.rid='bc84' req.bootstrap_room=2016 with exception KVTransferError(bootstrap_room=2016): Request 2016 "
    "timed out after 3.0s in KVPoll.Bootstrapping\", 'status_code': 500, 'err_type': None}}}"
)


_PDSIM_INFLIGHT = (
    "2026-12-04 14:42:15.986 INFO prefill event=req ts=1796395335.986036 rid=f1 bootstrap_room=7 state=failed "
    'error="Prefill transfer failed ... Request 7 timed out after 4.0s in the prefill inflight queue"'
)


_PDSIM_ABORTED = (
    "2026-12-04 14:42:15.986 INFO prefill event=req ts=1796395335.986036 rid=f2 bootstrap_room=8 state=failed "
    'error="Prefill transfer failed ... with exception Aborted by AbortReq."'
)


@pytest.mark.parametrize(
    ("line", "released"),
    [
        (PDSIM_WAITING, ("waiting timeout", 6.0)),
        (_SGLANG_BOOTSTRAP, ("bootstrap timeout", 3.0)),
        (_PDSIM_INFLIGHT, ("inflight watchdog", 4.0)),
        (_PDSIM_ABORTED, None),
    ],
)
def test_a_backstop_is_named_by_what_the_release_says(line, released):
    """Read once, when the line is captured: the verdicts read the fields."""
    assert backstop_of(line) == released
    fields = parse_engine_line(line)
    assert (None if "backstop" not in fields else (fields["backstop"], float(fields["backstop_s"]))) == released


def _released(lines: dict[str, tuple[str, str]]) -> History:
    h = History()
    for name, (service, line) in lines.items():
        op(h, name, 0, 2.0, Outcome.HUNG_UP)
        h.append(LogEvent(1.5, service, line, op=name, fields=parse_engine_line(line)))
    return h


def test_backstops_stay_idle():
    by_abort = _released({"a": ("prefill", _PDSIM_ABORTED)})
    assert status(v.backstops_stay_idle(), by_abort) is v.Status.PASS
    by_timeouts = _released({"a": ("prefill", _PDSIM_ABORTED), "b": ("decode", PDSIM_WAITING)})
    by_timeouts.append(LogEvent(1.6, "prefill", _SGLANG_BOOTSTRAP, op="b", fields=parse_engine_line(_SGLANG_BOOTSTRAP)))
    judged = v.backstops_stay_idle()(by_timeouts)
    assert judged.status is v.Status.FAIL, judged.message
    assert judged.evidence.ops == ("b",)
    assert judged.evidence.values["backstops"] == ["bootstrap timeout", "waiting timeout"]
    assert judged.evidence.values["of"] == 2
    router_only = _released({"a": ("router", "request_id=a " + PDSIM_WAITING)})  # smg repeats engines' bodies
    assert status(v.backstops_stay_idle(), router_only) is v.Status.UNKNOWN


def test_backstops_stay_idle_of_one_workload():
    """Scoped to a workload, only its requests' lines count: a backstop another workload's
    request met (a cut link's, where a timeout is the path) is not this one's failure."""
    h = History()
    for name, workload, line in (("a", "background#1", PDSIM_WAITING), ("b", "background#2", _PDSIM_ABORTED)):
        h.append(Invoke(0.0, 0.0, name, "/v1/chat/completions", True, workload=workload))
        h.append(Complete(2.0, 0.0, name, Outcome.CLEAN_ERROR, 500, "aborted"))
        h.append(LogEvent(1.5, "decode", line, op=name, fields=parse_engine_line(line)))
    assert status(v.backstops_stay_idle(workload="background#2"), h) is v.Status.PASS
    assert status(v.backstops_stay_idle(workload="background#1"), h) is v.Status.FAIL
    assert status(v.backstops_stay_idle(workload="background#9"), h) is v.Status.UNKNOWN
    assert v.backstops_stay_idle(workload="background#2").name == "backstops_stay_idle(background#2)"
