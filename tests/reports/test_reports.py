"""Reports: the where-is-it-stuck table against histories, crafted and recorded from the
real stack; timelines and summaries are drawn from saved files."""

from __future__ import annotations

import json

from chaos.clients.client import Deadlines
from chaos.observe.history import History
from chaos.observe.logs import LogCursor, capture_logs, parse_engine_line, parse_router_line
from chaos.observe.records import Complete, FaultEvent, Invoke, LogEvent, Outcome, Stage
from chaos.reports import render_timeline, where_stuck
from chaos.reports.summary import render_run, result_of, write_run_summary, write_test_report


def _op(h: History, op: str, outcome: Outcome | None, t1: float = 5.0) -> None:
    h.append(Invoke(0.0, 0.0, op, "/v1/chat/completions", True, "agent0", 0))
    if outcome is not None:
        h.append(Complete(t1, 0.0, op, outcome))


def _log(h: History, op: str, service: str, state: str, t: float) -> None:
    if service == "router":
        line = f"request_id={op} {state} processing request"
        h.append(LogEvent(t, service, line, op=op, fields=parse_router_line(line)))
    else:
        line = f"event=req rid=r-{op}-{service} state={state}"
        h.append(LogEvent(t, service, line, op=op, fields=parse_engine_line(line)))


def test_hops_from_crafted_histories():
    h = History()
    _op(h, "nobody", Outcome.CLIENT_TIMEOUT)
    _op(h, "router_only", Outcome.CLIENT_TIMEOUT)
    _log(h, "router_only", "router", "started", 1.0)
    _op(h, "pinned", Outcome.CLEAN_ERROR)
    _op(h, "timed_out", Outcome.CLEAN_ERROR)
    for op, svc, st, t in (
        ("pinned", "prefill", "bootstrap_queue", 1.0),
        ("pinned", "prefill", "waiting", 1.1),
        ("pinned", "prefill", "inflight", 1.5),
        ("pinned", "decode", "prealloc_queue", 1.0),
        ("pinned", "decode", "transfer_queue", 1.1),
        ("timed_out", "decode", "transfer_queue", 1.0),
        ("timed_out", "decode", "failed", 4.0),
        ("timed_out", "prefill", "bootstrap_queue", 1.0),
        ("timed_out", "prefill", "failed", 4.1),
    ):
        _log(h, op, svc, st, t)
    _op(h, "fine", Outcome.OK)
    rows = {r.op: r for r in where_stuck(h)}
    assert set(rows) == {"nobody", "router_only", "pinned", "timed_out"}
    assert rows["nobody"].hop == "client or proxy before the router"
    assert rows["router_only"].hop == "router" and "never finished" in rows["router_only"].evidence
    assert rows["pinned"].hop == "prefill inflight" and "decode: still in decode transfer" in rows["pinned"].evidence
    assert rows["timed_out"].hop == "prefill bootstrap"  # both failed: the earliest stage it never got past


def test_a_request_stuck_on_a_second_engine_names_it(tmp_path):
    """In a topology, decode2 passes decode's hops; the table and the timeline name it."""
    from chaos.observe.records import Sample

    h = History()
    _op(h, "on_decode2", Outcome.CLIENT_TIMEOUT)
    _log(h, "on_decode2", "prefill", "inflight", 1.0)
    _log(h, "on_decode2", "decode2", "transfer_queue", 1.0)
    _op(h, "failed_on_decode2", Outcome.CLEAN_ERROR)
    _log(h, "failed_on_decode2", "decode2", "transfer_queue", 1.0)
    _log(h, "failed_on_decode2", "decode2", "failed", 2.0)
    rows = {r.op: r for r in where_stuck(h)}
    assert rows["on_decode2"].hop == "prefill inflight", rows  # the earliest hop it never left, prefill's
    assert "decode2: still in decode transfer" in rows["on_decode2"].evidence
    assert rows["failed_on_decode2"].hop == "decode transfer (decode2)", rows
    for t in range(5):
        for engine in ("decode", "decode2"):
            h.append(Sample(float(t), engine, {"num_decode_transfer_queue_reqs": float(t % 2)}))
    assert render_timeline(h, tmp_path / "t.png").stat().st_size > 0


def test_table_from_the_real_stack_names_the_proxy_and_the_handshake(stack, history, sampler, workload, faults, bounds):
    """Requests stuck before the router, and in prefill's bootstrap queue, as the real
    router's and engines' logs show them."""
    cursor = LogCursor(stack.logs, ("prefill", "decode", "router"))
    body = {
        "model": "pdsim/deterministic-1",
        "messages": [{"role": "user", "content": "where am i"}],
        "max_tokens": 2,
        "stream": True,
    }
    with faults.blackhole("client_router", stream="upstream"):
        proxy_op = workload.request("/v1/chat/completions", body, deadlines=Deadlines(read_s=1.0, total_s=2.0)).op
    with faults.blackhole("control", stream="upstream"):
        handshake_op = workload.request(
            "/v1/chat/completions", body, deadlines=Deadlines(read_s=1.5, stall_s=1.0, total_s=2.0)
        ).op
    capture_logs(history, cursor, {proxy_op, handshake_op})
    rows = {r.op: r for r in where_stuck(history)}
    assert rows[proxy_op].hop == "client or proxy before the router", rows[proxy_op]
    assert rows[handshake_op].hop == "prefill bootstrap", rows[handshake_op]
    assert "router: " in rows[handshake_op].evidence  # the router saw it; prefill held it


def test_reports_are_drawn_and_redrawn_from_saved_files(tmp_path):
    (tmp_path / "t1").mkdir()
    h = History(path=tmp_path / "t1" / "history.jsonl")
    h.append(FaultEvent(1.0, 0.0, "kill#1", Stage.INJECT, "SIGKILL decode"))
    _op(h, "a", Outcome.CLEAN_ERROR, 2.0)
    h.append(FaultEvent(3.0, 0.0, "kill#1", Stage.HEALED, "SIGKILL decode"))
    h.close()
    result = result_of(h, nodeid="suites/x.py::t1", outcome="failed", duration_s=3.0)
    write_test_report(tmp_path / "t1", h, result)
    write_run_summary(tmp_path, [result], seed=7, command="pytest")
    assert (tmp_path / "t1" / "timeline.png").stat().st_size > 1000
    assert "pytest 'suites/x.py::t1' --seed 7" in (tmp_path / "summary.md").read_text()
    assert json.loads((tmp_path / "summary.json").read_text())["tests"][0]["faults"][0]["healed"] == 3.0
    (tmp_path / "t1" / "timeline.png").unlink()
    assert render_run(tmp_path) == 1 and (tmp_path / "t1" / "timeline.png").exists()


def test_timeline_of_an_empty_history(tmp_path):
    assert render_timeline(History(), tmp_path / "empty.png").exists()


def test_real_sglang_lines_join_by_routing_key():
    """SGLang 0.5.23 logs the routing_key smg forwards from x-smg-routing-key on its Receive:
    and Finish: lines: that joins them to the client's op. An open request is in the
    engine at a stage SGLang does not log; a Finish with reason abort is aborted."""
    from chaos.observe.pipeline import DECODE_UNSTAGED, PREFILL_UNSTAGED

    def line(kind: str, rid: str, key: str, reason: str = "length") -> str:
        out = (
            f", out={{'meta_info': {{'id': '{rid}', 'finish_reason': {{'type': '{reason}', 'message': 'x'}}}}}}"
            if kind == "Finish"
            else ""
        )
        return f"[2026-12-01 03:13:13] {kind}: obj=GenerateReqInput(rid='{rid}', session_id=None, bootstrap_room=7, routing_key='{key}', priority=None){out}"

    logs: dict[str, list[str]] = {"prefill": [], "decode": [], "router": []}
    cursor = LogCursor(lambda svc: "".join(entry + "\n" for entry in logs[svc]), ("prefill", "decode", "router"))
    logs["prefill"] += [
        line("Receive", "p1", "op-held"),
        line("Receive", "p2", "op-aborted"),
        line("Finish", "p2", "op-aborted", "abort"),
        line("Receive", "p3", "someone-else"),
    ]
    logs["decode"] += [
        line("Receive", "d1", "op-held"),
        line("Finish", "d1", "op-held"),
        line("Receive", "d2", "op-aborted"),
        line("Finish", "d2", "op-aborted", "abort"),
    ]
    h = History()
    _op(h, "op-held", Outcome.CLIENT_TIMEOUT)
    _op(h, "op-aborted", Outcome.CLEAN_ERROR)
    assert capture_logs(h, cursor, {"op-held", "op-aborted"}) == 7
    rows = {r.op: r for r in where_stuck(h)}
    assert (
        rows["op-held"].hop == PREFILL_UNSTAGED and "decode: ended in " + DECODE_UNSTAGED in rows["op-held"].evidence
    ), rows["op-held"]
    assert rows["op-aborted"].hop == PREFILL_UNSTAGED and "prefill: ended in" in rows["op-aborted"].evidence, rows[
        "op-aborted"
    ]


def test_a_real_sglang_finish_line_gives_its_cached_tokens():
    finish = "[2026-12-02 04:30:22] Finish: obj=GenerateReqInput(rid='d1', routing_key='op-1'), out={'meta_info': {'id': 'd1', 'finish_reason': {'type': 'length', 'length': 16}, 'prompt_tokens': 300, 'cached_tokens': 280}}"
    assert parse_engine_line(finish) == {
        "event": "req",
        "rid": "d1",
        "state": "finished",
        "ts": parse_engine_line(finish)["ts"],
        "xrid": "op-1",
        "cached_tokens": "280",
    }
    assert "cached_tokens" not in parse_engine_line(finish.replace("Finish", "Receive").split(", out=")[0])


def test_logs_read_in_two_takes_keep_each_request_with_its_op():
    """A scenario reads the logs before its verdicts, the teardown after: pdsim names the op
    only on a request's first line, and a line still being written waits for the next read."""
    log: list[str] = []
    cursor = LogCursor(lambda svc: "".join(log), ("prefill",))
    log += ["event=req rid=r1 state=received xrid=op-1\n", "event=req rid=r1 state=prefill_forward\n"]
    h = History()
    _op(h, "op-1", Outcome.OK)
    assert capture_logs(h, cursor, {"op-1"}) == 2
    log.append("event=req rid=r1 state=finished")  # no newline yet: half written
    assert capture_logs(h, cursor, {"op-1"}) == 0
    log[-1] += "\n"
    assert capture_logs(h, cursor, {"op-1"}) == 1  # joined by the rid the first take saw


def test_the_summary_names_each_stack_and_the_image_digests_it_ran(tmp_path):
    """What ran is in the report after the stack is gone: a Compose stack's images by the
    digest that pins them (the nightly job's record of the SGLang build it tested)."""
    from chaos.reports.summary import write_run_summary

    images = {
        "router": {
            "ref": "lightseekorg/smg:1.13.0",
            "id": "sha256:" + "a" * 64,
            "digests": ["lightseekorg/smg@sha256:" + "b" * 64],
        },
        "prefill": {"ref": "pdchaos/pdsim:local", "id": "sha256:" + "c" * 64, "digests": []},
    }
    (tmp_path / "stacks").mkdir()
    (tmp_path / "stacks" / "compose-gpu-21000.json").write_text(
        json.dumps(
            {
                "kind": "compose-gpu",
                "port_base": 21000,
                "config": {"model": "Qwen/Qwen2.5-0.5B-Instruct", "compose": {"images": images}},
            }
        )
    )
    write_run_summary(tmp_path, [], seed=1, command="pytest suites")
    summary = (tmp_path / "summary.md").read_text()
    assert "- compose-gpu on port base 21000, model Qwen/Qwen2.5-0.5B-Instruct" in summary
    assert f"  - router: `lightseekorg/smg:1.13.0` = lightseekorg/smg@sha256:{'b' * 64}" in summary
    assert f"  - prefill: `pdchaos/pdsim:local` = no registry digest (image sha256:{'c' * 12})" in summary


def test_a_failed_tests_logs_are_kept_whole_from_its_start_and_an_unreadable_one_says_why(tmp_path):
    from chaos.observe.logs import LogCursor, save_logs

    logs = {"prefill": "before\n", "decode": "old\n"}

    def read(name: str) -> str:
        if name == "router":
            raise OSError("container gone")
        return logs[name]

    cursor = LogCursor(lambda name: "" if name == "router" else read(name), ("prefill", "decode", "router"))
    cursor.read = read
    logs["prefill"] += "\x1b[32mduring\x1b[0m\n"
    logs["decode"] = "new\n"[1:]  # shorter than at the start: rotated, read whole
    saved = save_logs(tmp_path / "logs", cursor)
    assert [p.name for p in saved] == ["prefill.log", "decode.log"]
    assert (tmp_path / "logs" / "prefill.log").read_text() == "during\n"
    assert (tmp_path / "logs" / "decode.log").read_text() == "ew\n"
    assert "router's log could not be read: OSError: container gone" in (tmp_path / "logs" / "router.log").read_text()


_SMG = (
    '2026-12-06 07:18:36  INFO http_request{method=POST path=/v1/chat/completions version=HTTP/1.1 module="smg" '
    'request_id="op9"}: smg::request: model_gateway/src/middleware/logging.rs:170: '
)


def test_a_router_line_reads_as_its_request_and_what_smg_did_with_it():
    """smg 1.13.0's own lines, parsed once at capture: the stuck table and the doctor read
    ``state``, never the words."""
    started = parse_router_line(_SMG + "started processing request")
    assert (started["request_id"], started["state"]) == ("op9", "started") and float(started["ts"]) > 0
    assert parse_router_line(_SMG + "finished processing request status=200")["state"] == "finished"
    assert "state" not in parse_router_line(_SMG + "routing to worker")
    assert parse_router_line("2026-12-06 07:18:36  INFO no request here") == {}


_VETO = (
    "2026-12-07 13:44:34  INFO smg::worker::monitor: model_gateway/src/worker/monitor.rs:505: Worker overload veto "
    "{} worker_url=http://127.0.0.1:22009 overloaded=true waiting_requests=28 kv_pressure=0.5641"
)
_FAILED = (
    "2026-12-07 13:44:46  INFO smg::worker::manager: model_gateway/src/worker/manager.rs:693: Worker status "
    "transition worker_url=http://127.0.0.1:22021 old=NotReady new=Failed"
)


def test_a_router_line_about_a_worker_reads_as_its_veto_or_its_health():
    """smg 1.13.0's words for a load poll's veto and a health transition, parsed at capture."""
    assert parse_router_line(_VETO.format("set"))["veto"] == "set"
    cleared = parse_router_line(_VETO.format("cleared"))
    assert (cleared["worker"], cleared["veto"]) == ("http://127.0.0.1:22009", "cleared")
    failed = parse_router_line(_FAILED)
    assert (failed["worker"], failed["status"]) == ("http://127.0.0.1:22021", "Failed") and "veto" not in failed


def test_worker_lines_join_the_history_in_the_order_smg_logged_them(tmp_path):
    """Every line about a worker is kept (it names no request), between the lines of the
    test's own requests, in the router's order: what places a request inside a veto."""
    lines = [
        _SMG + "started processing request",
        _VETO.format("set"),
        _SMG.replace("op9", "op10") + "started processing request",
        _SMG.replace("op9", "other") + "started processing request",
        _VETO.format("cleared"),
    ]
    log = tmp_path / "router.log"
    log.write_text("")
    cursor = LogCursor(lambda _: log.read_text(), ("router",))
    log.write_text("\n".join(lines) + "\n")
    h = History()
    assert capture_logs(h, cursor, {"op9", "op10"}) == 4
    assert [(ev.op, ev.fields.get("veto", ev.fields.get("state"))) for ev in h.of(LogEvent)] == [
        ("op9", "started"),
        ("", "set"),
        ("op10", "started"),
        ("", "cleared"),
    ]
