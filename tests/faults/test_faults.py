"""Faults verify that they took effect, and are healed after success, errors and Ctrl-C."""

from __future__ import annotations

import os
import re
import signal
import threading
import time
from typing import Any

import httpx
import pytest

from chaos.errors import FaultNotApplied, TriggerTimeout
from chaos.faults import Kill, ToxicFault
from chaos.observe.records import Chunk, Complete, Invoke, Outcome, TriggerFired
from chaos.observe.triggers import (
    Condition,
    bytes_crossed,
    gauge,
    log_line,
    received,
    requests_sent,
    streaming_through,
    streams_begun,
)
from chaos.system.cleanup import terminate_as_interrupt
from chaos.targets.toxiproxy import Toxic
from tests import pdpair


def stages(history) -> list[str]:
    return [f.stage.value for f in history.faults()]


class NoOpKill(Kill):
    """A kill whose signal never gets sent: the silent no-op Dynamo lost two runs to."""

    def inject(self) -> None:
        pass


def test_verification_catches_a_kill_that_did_nothing(stack, faults, history):
    with pytest.raises(FaultNotApplied, match="decode is still running"), faults.apply(NoOpKill(stack, "decode")):
        pass
    assert stack.is_running("decode")
    assert stages(history) == ["inject", "heal", "healed", "heal_verified"]


def test_verification_catches_a_toxic_on_the_wrong_link(stack, faults):
    """A control run with deliberately wrong targeting must fail loudly: latency goes on the
    kv link, but the probe goes through client_router, which is unaffected."""
    probe = f"http://{stack.info.proxies['client_router']['listen']}/health"
    wrong = ToxicFault(faults.toxiproxy, "kv", Toxic("lat", "latency", attributes={"latency": 800}), probe_url=probe)
    with pytest.raises(FaultNotApplied, match=r"expected >= 0\.800s"), faults.apply(wrong):
        pass
    assert faults.toxiproxy.toxics("kv") == []


def test_a_toxic_whose_removal_hangs_is_healed_by_a_fresh_toxiproxy(stack, faults, history):
    """Toxiproxy 2.12.0 can hang removing a toxic, and then every call on that proxy
    (Shopify/toxiproxy#558): here its API hangs because the server is frozen. The heal
    restarts Toxiproxy (proxies created again, no toxic) and says so."""
    old = stack.pid("toxiproxy")
    with faults.bandwidth("kv", 1, stream="upstream"):
        stack.freeze("toxiproxy")
    assert stack.pid("toxiproxy") != old and not stack.is_frozen("toxiproxy")
    assert faults.toxiproxy.toxics("kv") == [] and set(faults.toxiproxy.proxies()) == set(stack.info.proxies)
    assert stages(history) == ["inject", "verified", "heal", "healed", "heal_verified"]
    assert "Toxiproxy restarted: its API hung removing the toxic" in history.faults()[-1].evidence


def test_a_proxy_whose_enable_hangs_is_healed_by_a_fresh_toxiproxy(stack, faults, history):
    """The same hung API, met by a proxy's heal (turned back on): a fresh Toxiproxy creates
    every proxy enabled."""
    old = stack.pid("toxiproxy")
    with faults.down("kv"):
        stack.freeze("toxiproxy")
    assert stack.pid("toxiproxy") != old and faults.toxiproxy.get("kv").enabled
    assert stages(history) == ["inject", "verified", "heal", "healed", "heal_verified"]
    assert "Toxiproxy restarted: its API hung enabling the proxy" in history.faults()[-1].evidence


def test_the_tests_own_toxics_heal_as_the_rigs(stack):
    """tests/pdpair.py's toxic, used by the pdsim tests, removes its toxic through the same
    bounded heal: a hung API restarts Toxiproxy instead of erroring the test (the first
    `make test` of a new user once errored so, in test_defects.py)."""
    old = stack.pid("toxiproxy")
    with pdpair.toxic(stack, "kv", "bandwidth", stream="upstream", rate=1):
        stack.freeze("toxiproxy")
    assert stack.pid("toxiproxy") != old
    with stack.toxiproxy() as tp:
        assert tp.toxics("kv") == []


def test_kill_is_verified_and_healed_by_a_restart(stack, faults, history):
    old = stack.pid("decode")
    with faults.kill("decode"):
        assert not stack.is_running("decode")
    assert stack.is_running("decode") and stack.pid("decode") != old
    assert stages(history) == ["inject", "verified", "heal", "healed", "heal_verified"]


def test_terminate_waits_for_the_exit_then_starts_the_service_again(stack, faults, history):
    old = stack.pid("decode")
    with faults.terminate("decode", drain_s=5):
        pass  # idle: pdsim drains at its first check, a second after the signal
    assert stack.is_running("decode") and stack.pid("decode") != old
    assert stages(history) == ["inject", "verified", "heal", "healed", "heal_verified"]
    assert "exited" in history.faults()[-1].evidence and "started again" in history.faults()[-1].evidence


def test_freeze_is_healed_after_an_exception(stack, faults, history):
    with pytest.raises(RuntimeError, match="scenario blew up"), faults.freeze("decode"):
        assert stack.is_frozen("decode")
        raise RuntimeError("scenario blew up")
    assert not stack.is_frozen("decode")
    assert stages(history)[-2:] == ["healed", "heal_verified"]


def test_toxic_is_healed_after_sigint(stack, faults):
    try:
        with pytest.raises(KeyboardInterrupt), faults.blackhole("client_router"):
            os.kill(os.getpid(), signal.SIGINT)
    finally:
        terminate_as_interrupt()  # the first interrupt disarms later ones; re-arm for the session
    assert faults.toxiproxy.toxics("client_router") == []
    assert httpx.get(stack.info.endpoints["client"] + "/health", timeout=2).status_code == 200


@pytest.mark.parametrize(
    "make, evidence",
    [
        (lambda f: f.latency("client_router", 600), r"probe: ok after (0\.[6-9]|[1-9])"),  # at least the 600 ms added
        (lambda f: f.blackhole("client_router"), r"probe: timeout"),
        (lambda f: f.down("client_router"), r"refused"),
        (lambda f: f.reset_peer("client_router"), r"probe: reset"),
        (lambda f: f.bandwidth("kv", 100, stream="upstream"), r"raw TCP link: no probe"),
    ],
)
def test_network_faults_verify_their_effect_and_heal(stack, faults, history, make, evidence):
    with make(faults):
        pass
    verified = next(f for f in history.faults() if f.stage == "verified")
    assert re.search(evidence, verified.evidence), verified.evidence
    assert all(p.toxics == () and p.enabled for p in faults.toxiproxy.proxies().values())


def _long_prompt(workload) -> threading.Thread:
    """A request whose 1500-word prompt keeps pdsim's prefill busy for about 1.5 s, sent
    from a thread that is already running."""
    body = {
        "model": "pdsim/deterministic-1",
        "messages": [{"role": "user", "content": "word " * 1500}],
        "max_tokens": 2,
    }
    th = threading.Thread(target=workload.request, args=("/v1/chat/completions", body))
    th.start()
    return th


def test_metric_trigger_fires_and_is_recorded(stack, faults, workload, history):
    th = _long_prompt(workload)
    faults.wait(gauge("prefill", "num_running_reqs") > 0, deadline_s=10)
    th.join(timeout=20)
    fired = [r for r in history.records if getattr(r, "kind", "") == "trigger"]
    assert fired and fired[0].trigger == "prefill:num_running_reqs > 0"


def test_a_cache_flush_is_refused_while_an_engine_is_busy_and_done_once_idle(stack, faults, workload, history):
    """The engine's own answer is the flush's evidence: a 400 while prefill holds a long
    prompt, a 200 once it is idle; it strikes no engine and has nothing to heal."""
    from chaos.observe.records import FaultEvent, Stage

    th = _long_prompt(workload)
    with faults.flush_cache("prefill", when=gauge("prefill", "num_running_reqs") > 0):
        pass
    th.join(timeout=20)
    with faults.flush_cache("prefill"):
        pass
    verified = [e for e in history.of(FaultEvent) if e.stage is Stage.VERIFIED]
    assert [e.evidence for e in verified] == [
        "prefill answered 400 to /flush_cache: refused (busy)",
        "prefill answered 200 to /flush_cache: flushed",
    ]
    assert all(e.implicates == () and e.action == "flush_cache" for e in verified)


def test_trigger_that_never_holds_names_its_signal(stack, faults):
    with pytest.raises(TriggerTimeout, match=r"decode:num_decode_transfer_queue_reqs > 1000.*last value: 0.0"):
        faults.wait(gauge("decode", "num_decode_transfer_queue_reqs") > 1000, deadline_s=0.5)


def test_bytes_crossed_trigger_reads_toxiproxy_counters(stack, faults, workload):
    workload.request("/generate", {"text": "bytes " * 50, "sampling_params": {"max_new_tokens": 2}})
    assert float(faults.wait(bytes_crossed("kv") > 0, deadline_s=5)) >= 50 * 1024  # 1 KB of KV per token


def test_a_log_line_matches_under_the_colours_smg_writes(sampler):
    """smg 1.13.0 colours its log lines' fields with ANSI codes, NO_COLOR or not: a pattern
    spanning them matches the line as read, not as written (a veto of smg's went unseen)."""

    class Log:
        text = ""

        def logs(self, service: str) -> str:
            return self.text

    log = Log()
    cond = log_line(log, "router", r"INFO smg::worker::monitor: .* veto set worker_url=http://d ")
    log.text = "\x1b[2m2026-12-07 13:22:07\x1b[0m \x1b[32m INFO\x1b[0m \x1b[2msmg::worker::monitor\x1b[0m: x veto set worker_url=http://d overloaded=true\n"
    assert cond.check(sampler, 0.0)[0]


def test_log_line_trigger(stack, faults, workload):
    cond = log_line(stack, "decode", r"state=running")
    workload.request("/generate", {"text": "log trigger", "sampling_params": {"max_new_tokens": 2}})
    assert "state=running" in faults.wait(cond, deadline_s=5)


def test_until_heals_as_soon_as_its_condition_holds(history, sampler, faults):
    t0 = time.monotonic()
    with faults.latency("client_router", 10, until=gauge("router", "smg_worker_requests_active") <= 0, hold_s=10):
        pass  # nothing in flight: the condition holds at the next sample
    assert time.monotonic() - t0 < 3
    assert stages(history)[-2:] == ["healed", "heal_verified"]
    assert any(
        isinstance(r, TriggerFired) and r.trigger.startswith("heal once router:smg_worker_requests_active")
        for r in history.records
    )


def test_until_that_never_holds_heals_after_hold_s_without_a_rig_error(history, sampler, faults):
    t0 = time.monotonic()
    with faults.latency("client_router", 10, until=gauge("router", "smg_worker_requests_active") > 1000, hold_s=1.0):
        pass
    assert 1.0 <= time.monotonic() - t0 < 3  # the verdicts judge what did not happen
    assert stages(history)[-2:] == ["healed", "heal_verified"]
    assert not any(isinstance(r, TriggerFired) and r.trigger.startswith("heal once") for r in history.records)


def test_requests_sent_and_a_conjunction_of_conditions(history, sampler):
    """``a & b`` holds only when both do at the same look, and shows what each saw."""
    sent = requests_sent(history, 2)
    yes = Condition("always", lambda _s, _t: (True, "yes"))
    assert not (sent & yes).check(sampler, 0.0)[0]
    for name in ("a", "b"):
        history.append(Invoke(history.now(), 0.0, name, "/v1/chat/completions", False))
    holds, seen = (sent & yes).check(sampler, 0.0)
    assert holds and seen == "2 sent; yes" and (sent & yes).describe == "2 requests sent and always"


def test_a_disjunction_of_conditions_holds_when_either_does(history, sampler):
    """``a | b`` holds when one of them does at the same look, and shows what each saw."""
    sent = requests_sent(history, 1)
    no = Condition("never", lambda _s, _t: (False, "no"))
    assert not (sent | no).check(sampler, 0.0)[0]
    history.append(Invoke(history.now(), 0.0, "a", "/v1/chat/completions", False))
    holds, seen = (no | sent).check(sampler, 0.0)
    assert holds and seen == "no; 1 sent" and (no | sent).describe == "(never or 1 requests sent)"


def test_streams_begun_holds_once_an_open_stream_has_bytes(history, sampler):
    """Mid-stream: a stream with bytes and no end yet; one that ended does not count."""
    begun = streams_begun(history, 1)
    history.append(Invoke(history.now(), 0.0, "s", "/v1/chat/completions", True))
    assert not begun.check(sampler, 0.0)[0]  # sent, no byte yet
    history.append(Chunk(history.now(), "s", 10))
    assert begun.check(sampler, 0.0) == (True, "1 streaming")
    history.append(Complete(history.now(), 0.0, "s", Outcome.OK, 200))
    assert not begun.check(sampler, 0.0)[0]


def test_received_holds_once_the_engine_logs_one_of_the_tests_requests(history, sampler):
    """prefill holds a short prompt for milliseconds; its log line is there for good. Lines
    from before the test, of another test's request, or SGLang's own health checks do not count."""
    log = ["2026-12-04 19:05:18.984 INFO prefill event=req ts=1.0 rid=r0 state=received xrid=old"]
    cond = received(history, "prefill", lambda: "\n".join(log), since=len(log[0]))
    history.append(Invoke(history.now(), 0.0, "op1", "/v1/chat/completions", False))
    log.append("[2026-12-04 19:05:19] Receive: obj=GenerateReqInput(rid='HEALTH_CHECK_1', routing_key='')")
    log.append("2026-12-04 19:05:19.100 INFO prefill event=req ts=1.1 rid=r1 state=received xrid=other")
    assert not cond.check(sampler, 0.0)[0]
    log.append("[2026-12-04 19:05:19] Receive: obj=GenerateReqInput(rid='abc', routing_key='op1', text='x')")
    assert cond.check(sampler, 0.0) == (True, "prefill received op1")
    # and holds on: joined by `&` to a condition that holds later, it is asked again (the
    # line read once is not read twice: the topology suite's trigger never fired before)
    log.append("2026-12-04 19:05:19.200 INFO prefill event=req ts=1.2 rid=r2 state=waiting")
    assert cond.check(sampler, 0.0) == (True, "prefill received op1")


def test_streaming_through_holds_while_a_stream_the_engine_received_is_open(history, sampler):
    """An engine's log names the op it received; the condition holds while that op streams
    (bytes in, no end), not before its first byte nor once it ended, nor for another
    engine's stream."""
    log = ["2026-12-04 19:05:19.100 INFO decode2 event=req ts=1.1 rid=r1 state=received xrid=mine"]
    cond = streaming_through(history, "decode2", lambda: "\n".join(log) + "\n", since=0)
    history.append(Invoke(history.now(), 0.0, "mine", "/v1/chat/completions", True))
    history.append(Invoke(history.now(), 0.0, "other", "/v1/chat/completions", True))
    history.append(Chunk(history.now(), "other", 10))
    assert not cond.check(sampler, 0.0)[0]  # its own has no byte yet; another's does
    history.append(Chunk(history.now(), "mine", 10))
    assert cond.check(sampler, 0.0) == (True, "decode2 streaming mine")
    history.append(Complete(history.now(), 0.0, "mine", Outcome.OK, 200))
    assert not cond.check(sampler, 0.0)[0]


def test_a_fault_names_the_engines_it_strikes():
    """What smg may charge (v.charged_only_where_struck): the engine a process fault or an
    abort hits, both ends of a link between the engines, none for the client's link, the
    router or the clients' own errors."""
    from chaos.faults import ClientFault, Freeze, ProxyDown, Restart
    from chaos.faults.engine_api import AbortAll

    toxic = Toxic("t", "timeout", "downstream", 1.0, {})
    none: Any = None  # what a fault's declaration reads needs no target and no Toxiproxy
    assert Kill(none, "decode").implicates == ("decode",) and Freeze(none, "prefill").implicates == ("prefill",)
    assert Restart(none, "router").implicates == () and AbortAll(none, "prefill").implicates == ("prefill",)
    assert (
        ToxicFault(none, "kv", toxic).implicates == ("prefill", "decode") == ProxyDown(none, "bootstrap", "").implicates
    )
    assert ToxicFault(none, "client_router", toxic).implicates == () == ClientFault("bad requests").implicates
