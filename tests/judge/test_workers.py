"""``chaos.judge.workers``: one worker of two struck. Each check passes on a good history and
fails (or is unknown, or not at stake) on a crafted bad one, histories written by hand."""

from __future__ import annotations

from chaos import verdicts as v
from chaos.observe.history import History
from chaos.observe.records import Chunk, Complete, FaultEvent, Invoke, LogEvent, Outcome, Stage
from tests.judge.histories import op


def struck(h: History, inject: float = 10.0, heal: float = 20.0, engine: str = "decode2") -> None:
    for t, stage in ((inject, Stage.INJECT), (heal, Stage.HEALED)):
        h.append(FaultEvent(t, 0.0, "kill#1", stage, f"SIGKILL {engine}", implicates=(engine,), action="kill"))


def served(h: History, name: str, t0: float, t1: float, engine: str, outcome: Outcome = Outcome.OK) -> None:
    """A request and the engine that logged it (prefill logs every one: it is no decode's twin)."""
    op(h, name, t0, t1, outcome)
    h.append(LogEvent(t0 + 0.01, "prefill", f"rid={name}", op=name, fields={"rid": name}))
    h.append(LogEvent(t0 + 0.02, engine, f"rid={name}", op=name, fields={"rid": name}))


def test_the_twins_requests_must_all_succeed_while_one_is_struck():
    h = History()
    struck(h)
    served(h, "a", 9.0, 11.0, "decode")  # in flight at the strike, on the twin
    served(h, "b", 9.5, 10.5, "decode2", Outcome.CLEAN_ERROR)  # the struck one's: may fail
    served(h, "c", 12.0, 13.0, "decode")
    op(h, "d", 12.5, 13.0, Outcome.CLEAN_ERROR)  # placed on no decode: counted, never the twin's
    judged = v.healthy_workers_unaffected(struck="decode2")(h)
    assert judged.status is v.Status.PASS, judged
    assert judged.evidence.values == {"at_stake": 1, "in_flight_at_strike": 1, "of": 2, "unplaced": 1}
    served(h, "e", 13.0, 14.0, "decode", Outcome.CLEAN_ERROR)
    failed = v.healthy_workers_unaffected(struck="decode2")(h)
    assert failed.status is v.Status.FAIL and failed.evidence.ops == ("e",), failed


def test_the_twin_proves_nothing_without_a_request_in_flight_at_the_strike():
    h = History()
    struck(h)
    served(h, "a", 12.0, 13.0, "decode")
    assert v.healthy_workers_unaffected(struck="decode2")(h).status is v.Status.NOT_AT_STAKE
    assert v.healthy_workers_unaffected(struck="decode2")(History()).status is v.Status.UNKNOWN


def test_a_request_sent_past_the_bound_must_go_to_the_twin_and_succeed():
    h = History()
    struck(h)
    served(h, "early", 11.0, 11.5, "decode2", Outcome.CLEAN_ERROR)  # within the bound: the router may not know yet
    served(h, "late", 17.0, 17.5, "decode")
    judged = v.routed_around(struck="decode2", within_s=6.0)(h)
    assert judged.status is v.Status.PASS and judged.evidence.values["of"] == 1, judged
    served(h, "sent_there", 18.0, 18.5, "decode2")
    wrong = v.routed_around(struck="decode2", within_s=6.0)(h)
    assert wrong.status is v.Status.FAIL and wrong.evidence.ops == ("sent_there",), wrong
    nothing = History()
    struck(nothing, heal=12.0)
    served(nothing, "a", 11.0, 11.5, "decode")
    assert v.routed_around(struck="decode2", within_s=6.0)(nothing).status is v.Status.NOT_AT_STAKE


def test_the_healed_worker_must_serve_again_within_the_bound():
    h = History()
    struck(h)
    served(h, "twin", 20.5, 21.0, "decode")
    served(h, "late", 27.0, 28.0, "decode2")  # its first, 8 s after the heal
    slow = v.taken_back(struck="decode2", within_s=5.0)(h)
    assert slow.status is v.Status.FAIL and slow.evidence.values["served"] == 1, slow
    served(h, "back", 22.0, 23.0, "decode2")
    judged = v.taken_back(struck="decode2", within_s=5.0)(h)
    assert judged.status is v.Status.PASS and judged.evidence.values["taken_back_s"] == 3.0, judged
    short = History()
    struck(short)
    served(short, "twin", 20.5, 21.0, "decode")  # no request sent past the bound: it could not be told
    assert v.taken_back(struck="decode2", within_s=5.0)(short).status is v.Status.UNKNOWN


def test_a_stream_on_the_twin_that_went_on_hides_no_fault():
    """no_hidden_fault, with two decodes: a stream the twin served through decode2's kill
    succeeds, as it should; only a stream decode2 logged counts as one it was serving."""
    h = History()
    h.append(FaultEvent(1.0, 0.0, "kill#1", Stage.INJECT, "SIGKILL decode2", implicates=("decode2",), action="kill"))
    h.append(FaultEvent(1.1, 0.0, "kill#1", Stage.VERIFIED, "SIGKILL decode2", implicates=("decode2",), action="kill"))

    def stream_on(name: str, engine: str) -> None:
        h.append(Invoke(0.0, 0.0, name, "/v1/chat/completions", True))
        h.append(LogEvent(0.05, engine, f"rid={name}", op=name, fields={"rid": name}))
        for i in range(2, 31):
            h.append(Chunk(i / 10, name, 10))
        h.append(Complete(3.01, 0.0, name, Outcome.OK, 200, "", "text", 5, 8, first_byte_t=0.2))

    stream_on("twin", "decode")
    judged = v.no_hidden_fault(service="decode2")(h)
    assert judged.status is v.Status.NOT_AT_STAKE and "no stream had begun on decode2" in judged.message, judged
    stream_on("its", "decode2")
    hidden = v.no_hidden_fault(service="decode2")(h)
    assert hidden.status is v.Status.FAIL and hidden.evidence.ops == ("its",), hidden
