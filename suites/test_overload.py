"""Under overload requests queue, and are served: no timeout fires whose clock should not be
running, nothing leaks, and where the router sheds load it does so at the door, with its
status.

Bug class: a PD timeout measured from the wrong moment turns queueing into failures. SGLang
starts decode's waiting clock when decode sends its metadata to prefill (``init_time`` in
``disaggregation/common/conn.py``, 0.5.23), so time spent in decode's prealloc queue,
waiting for a free slot, is not counted; a clock started on arrival fails every request that
queued longer than the timeout although nothing is wrong (#10110, #11648, #9266: bootstrap
and waiting timeouts under load). Prefill's bootstrap clock does run from arrival until
decode's metadata comes, by design, so this module's stack sets it long and decode's waiting
timeout short: a request may queue many times the waiting timeout and must still succeed.

The same stack holds requests at prefill long enough to send it SIGTERM while it holds them
(class 7, graceful shutdown, for the engine a request passes through only briefly): while
decode's slots are full, prefill keeps each request in its bootstrap queue until decode
sends its metadata. A draining prefill must serve them all before it exits (SGLang's
``sigterm_watchdog`` waits for its requests), and say so on /health first.

Fault model: load alone, on a stack of this module's own (every target that starts stacks;
an attached deployment skips): decode runs 2 requests at a time (SGLang then holds 4 more in
transfer and waiting, then queues the rest in prealloc), and smg admits 24 requests at once
with 4 more queued. Verdicts: every queued request succeeds, decode's transfer-failure and
prefill's bootstrap-failure counters stay flat (no watchdog fired under load alone), every
queue and in-flight gauge returns to its baseline; and beyond smg's limits, the excess is
refused with 429 at once, the rest served. Premises: decode's prealloc queue held requests
for longer than the waiting timeout; the burst filled smg's admission permits.
"""

from __future__ import annotations

from typing import Any

import pytest

from chaos import verdicts as v
from chaos.judge.declare import premise, verdict
from chaos.judge.model import Finding, met, nothing_at_stake, passed, unmet
from chaos.judge.ops import all_within, completed, label, naming, none_completed
from chaos.observe.history import History
from chaos.observe.pipeline import (
    DECODE_TRANSFER_FAILED,
    ENGINE_QUEUES,
    PREFILL_BOOTSTRAP_FAILED,
    ROUTER_INFLIGHT,
    Metric,
)
from chaos.observe.records import Outcome, Phase
from chaos.observe.triggers import gauge, requests_sent
from chaos.targets.stack import Timeouts

pytestmark = [pytest.mark.fault("load")]

RUNNING = 2  # decode's running batch: a small one, so that a few dozen requests overload it
ADMITTED = 24  # smg's --max-concurrent-requests
ROUTER_QUEUE = 4  # smg's --queue-size
SHED = 6  # requests beyond both in the shedding test
QUEUED = 24  # requests of the queueing test, all within smg's admission
ARRIVAL_S = 0.1  # ten a second: arrivals outpace decode's 2-at-a-time service many times over
TOKENS = 250  # each request's reply length: about 1.2 s per wave of 2 on pdsim (5 ms a step), 0.8-4 s on SGLang on CPU
# The clients' and smg's deadline bounds a hang and judges nothing: it must outlast the whole
# load's service on the slowest machine this runs on (12 waves of 400 tokens took over 90 s
# on a CI machine five times slower than usual)
REQUEST_TIMEOUT_S = 150
HELD = 12  # the SIGTERM test's streams: 6 fill decode's slots, the rest wait in prefill's bootstrap queue
DECODE_PREALLOC = Metric("decode", "num_decode_prealloc_queue_reqs")
PREFILL_BOOTSTRAP = Metric("prefill", "num_prefill_bootstrap_queue_reqs")
ADMISSION = Metric("router", "smg_admission_inflight")  # smg's admission permits in use
# A refusal at the door: far under smg's queue timeout (60 s), the next way a request could be
# turned away, with room for 34 clients connecting at once on 2 busy cores (0.83 s seen on SGLang)
DOOR_S = 3.0


@verdict(lambda status, phase, **_: f"served_or_refused({status}, {Phase(phase).value})")
def served_or_refused(h: History, status: int, *, phase: Phase) -> Finding:
    """Every request of ``phase`` either succeeded or was refused with ``status``: load
    shedding turns the excess away and serves the rest whole, it fails nothing else."""
    ops = completed(h, phase)
    if not ops:
        return nothing_at_stake(none_completed(phase))
    bad = [o for o in ops if o.outcome is not Outcome.OK and o.complete.status != status]
    if bad:
        return naming(
            bad,
            len(ops),
            f"neither served nor refused with {status}",
            lambda o: f"{label(o)} got {o.complete.status} and ended {o.outcome.value} {o.complete.error[:100]}",
            shown=3,
        )
    refused = sum(1 for o in ops if o.complete.status == status)
    return passed(
        f"{len(ops) - refused} served, {refused} refused with {status}",
        stake=len(ops),
        served=len(ops) - refused,
        refused=refused,
    )


@verdict(lambda status, within_s, phase, **_: f"refused_within({status}, {within_s:g}s, {Phase(phase).value})")
def refused_within(h: History, status: int, within_s: float, *, phase: Phase) -> Finding:
    """Every request of ``phase`` answered ``status`` got that answer within ``within_s`` of
    its send: a refusal is shed at the door, not after the request waited for a timeout."""
    refused = [(o.latency, o) for o in completed(h, phase) if o.complete.status == status]
    if not refused:
        return nothing_at_stake(f"no request of phase {Phase(phase).value!r} was answered {status}")
    return all_within(
        refused,
        within_s,
        over="refusals came late",
        each="after {:.2f}s",
        shown="{n} refusals, the slowest in {worst:.2f}s",
    )


@premise(lambda gauge, value, **_: f"gauge_reached({gauge[0]}:{gauge[1]} >= {value:g})")
def gauge_reached(h: History, gauge: Metric, value: float, *, why: str) -> Finding:
    """Premise: ``gauge`` reached ``value`` in some sample (the load filled what it meant to
    fill, e.g. the router's admission permits)."""
    source, metric = gauge
    series = h.series(source, metric)
    if not series:
        return unmet(f"no samples of {source}:{metric}")
    peak = max(val for _, val in series)
    if peak < value:
        return unmet(f"{metric} peaked at {peak:g} ({why})", peak=peak, wanted=value)
    return met(f"{metric} peaked at {peak:g}", peak=peak, wanted=value)


@premise(lambda gauge, at_least_s, **_: f"queued_for({gauge[0]}:{gauge[1]}, {at_least_s:g}s)")
def queued_for(h: History, gauge: Metric, at_least_s: float, *, why: str) -> Finding:
    """Premise: ``gauge`` (a queue's length) stayed above 0 for ``at_least_s`` without a
    break, in consecutive samples: the load really queued there that long."""
    source, metric = gauge
    series = h.series(source, metric)
    if not series:
        return unmet(f"no samples of {source}:{metric}")
    longest, begun, peak = 0.0, None, max(val for _, val in series)
    for t, val in series:
        if val > 0:
            begun = t if begun is None else begun
            longest = max(longest, t - begun)
        else:
            begun = None
    figures: dict[str, Any] = {"held_s": round(longest, 3), "peak": peak, "wanted_s": at_least_s}
    if longest < at_least_s:
        return unmet(f"{metric} held above 0 for {longest:.2f}s at most, peak {peak:g} ({why})", **figures)
    return met(f"{metric} held above 0 for {longest:.2f}s, peak {peak:g}", **figures)


@pytest.fixture(scope="module")
def stack(stack_factory):
    """This module's stack: short waiting timeout, long bootstrap timeout, a small decode,
    smg's admission limits set."""
    # SGLang's own bootstrap timeout (300 s): its clock runs while decode's prealloc queue
    # holds a request, by design, so it must outlast the longest queueing of this load (25 s
    # on real SGLang on CPU in CI, 62 s beside a make test; with 400-token requests 66 s on a
    # slow CI machine, where a 60 s timeout failed two)
    with stack_factory.own(
        timeouts=Timeouts(bootstrap_s=300, waiting_s=3, inflight_s=20),
        max_running_requests=RUNNING,
        decode_ms_per_step=5.0,
        router_max_concurrent_requests=ADMITTED,
        router_queue_size=ROUTER_QUEUE,
        router_request_timeout_s=REQUEST_TIMEOUT_S,
    ) as target:
        yield target


def mixed(workload, n: int, *, max_tokens: int, tag: str) -> list[dict]:
    """Long and short prompts, streamed and not, alternating."""
    return [
        workload.chat(
            f"{tag} {i}: " + ("harbor lantern " * (120 if i % 3 == 0 else 4)),
            max_tokens=max_tokens,
            ignore_eos=True,
            stream=i % 2 == 0,
        )
        for i in range(n)
    ]


def test_queued_requests_are_served_not_timed_out(scenario, workload, faults, bounds):
    # a queued stream sends no byte until it leaves decode's queues: its stall bound is the
    # router's (queue_past sends each to the patient deadlines)
    scenario.judge(
        v.outcomes_in(set(), phase=Phase.FAULT),
        v.counter_never_rises(
            DECODE_TRANSFER_FAILED,
            why="decode's waiting clock starts when its metadata goes to prefill, not on arrival",
        ),
        v.counter_never_rises(
            PREFILL_BOOTSTRAP_FAILED, why="decode's metadata reached prefill within its bootstrap timeout"
        ),
    )
    queue_past(scenario, workload, faults, bounds, past_s=bounds.waiting_s, timeout="waiting")


def queue_past(scenario, workload, faults, bounds, *, past_s: float, timeout: str, note: str = "") -> None:
    """The queueing load, a fault of the clients' own (``note`` adds to its description):
    QUEUED mixed requests into decode's small window, each to its patient deadlines; then the
    premise that decode's prealloc held requests past ``past_s`` and the slack (the ``timeout``
    the load is to outlast), and the settle."""
    with faults.by_clients(
        f"overload: {QUEUED} requests, one every {ARRIVAL_S:g} s, {TOKENS} tokens each, into a decode running "
        f"{RUNNING}{note}"
    ):
        workload.background(
            mixed(workload, QUEUED, max_tokens=TOKENS, tag="queued"), deadlines=bounds.patient(), interval_s=ARRIVAL_S
        ).join()
    scenario.require(
        queued_for(
            DECODE_PREALLOC,
            past_s + bounds.slack_s,
            why=f"the load never queued in prealloc longer than the {timeout} timeout",
        )
    )
    scenario.settle(ENGINE_QUEUES + ROUTER_INFLIGHT, within_s=bounds.quiet_s)


def test_the_router_sheds_beyond_its_limits_at_once_and_serves_the_rest(scenario, workload, faults, bounds):
    d = bounds.patient()
    n = ADMITTED + ROUTER_QUEUE + SHED
    scenario.judge(
        served_or_refused(429, phase=Phase.FAULT),
        refused_within(429, DOOR_S, phase=Phase.FAULT),
        v.failed_requests_are_clean(),
        v.statuses_tell_the_truth(),  # shed: a status that says "retry", not the client's error
    )
    with faults.by_clients(f"burst: {n} requests at once against smg's {ADMITTED} admitted and {ROUTER_QUEUE} queued"):
        workload.background(
            mixed(workload, n, max_tokens=150, tag="burst"), deadlines=d
        ).join()  # long enough that no permit frees during the burst
    scenario.require(gauge_reached(ADMISSION, ADMITTED, why="the burst never filled smg's admission"))
    scenario.settle(ENGINE_QUEUES + ROUTER_INFLIGHT, within_s=bounds.quiet_s)


@pytest.mark.needs("process_control")
def test_prefill_sigterm_drains_the_requests_it_holds(scenario, workload, faults, bounds, history):
    d = bounds.patient()
    scenario.watch_health("prefill")
    scenario.judge(
        v.outcomes_in(set(), phase=Phase.FAULT),  # each held request is served, to [DONE] for a stream
        v.not_ready_before_gone("prefill"),
    )
    streams = workload.background(mixed(workload, HELD, max_tokens=TOKENS, tag="held"), deadlines=d)
    # the drain may take as long as the requests it holds need: bounded by the client's deadline
    held = gauge(*PREFILL_BOOTSTRAP) >= HELD // 4
    with faults.terminate(
        "prefill", drain_s=bounds.router_timeout_s, when=requests_sent(history, HELD, phase=Phase.FAULT) & held
    ):
        streams.join()
    scenario.require(v.open_at_fault(phase=Phase.FAULT, why="prefill held them when the SIGTERM came"))
    scenario.settle(ENGINE_QUEUES + ROUTER_INFLIGHT, within_s=bounds.quiet_s)
