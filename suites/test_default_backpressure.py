"""Backpressure with the defaults' relation: load wider than decode's window, on engines whose
bootstrap and waiting timeouts stand to each other as SGLang 0.5.23 ships them: no request
that only queued may fail.

Bug class: a clock that runs while a request merely waits. SGLang 0.5.23's prefill starts a
room's bootstrap clock when the request arrives (``init_time`` in ``_check_bootstrap_timeout``,
``disaggregation/common/conn.py``; from prefill's completion only under
``--disaggregation-decode-allocation-policy prefill_complete``) and stops it when decode sends
the room's KV indices, which decode does only once its prealloc queue admits the request. Load
wider than decode's running window queues there past the bootstrap timeout, and requests fail
in waves though nothing is wrong (sglang#9726; smg#2463 / tokenspeed#1427: 14 of 64 failed, an
eval took 1392 s instead of 35 s). smg 1.13.0 sends each request to both engines at once; its
later releases admit only the rooms decode can take (smg#2466). ``suites/test_overload.py``
sets the bootstrap timeout long, by design, so it never asks what the defaults do: this module
keeps their relation.

Fault model: load alone, on a stack of the module's own: decode runs 2 requests at a time;
prefill's bootstrap timeout equals decode's waiting timeout, as SGLang's defaults do (300 s
each), at 6 s, and smg's request timeout (1800 s by default) is scaled the same, 1:50, to 36 s;
smg's admission is its default (unbounded). Verdicts: every request succeeds, and prefill's
bootstrap-failure counter stays flat; nothing stays queued. Premise: decode's prealloc queue
held requests longer than the bootstrap timeout (the load queued; else it tested nothing).
"""

from __future__ import annotations

import pytest

from chaos import verdicts as v
from chaos.observe.pipeline import PREFILL_BOOTSTRAP_FAILED
from chaos.observe.records import Phase
from chaos.targets.stack import Timeouts
from chaos.upstream import sglang_known
from suites.test_overload import RUNNING, queue_past

pytestmark = [pytest.mark.fault("load")]

# SGLang 0.5.23's SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT and _WAITING_TIMEOUT (srt/environ.py,
# 300 s each) and smg 1.13.0's --request-timeout-secs (1800 s), scaled 1:50 like the seconds
# this rig runs its engines' other timeouts at
SCALE = 50
DEFAULTS = Timeouts(bootstrap_s=300 // SCALE, waiting_s=300 // SCALE)
ROUTER_REQUEST_TIMEOUT_S = 1800 // SCALE

SGLANG_CLOCKS_THE_QUEUE = (
    "prefill's bootstrap clock runs from a request's arrival (init_time, _check_bootstrap_timeout in "
    "disaggregation/common/conn.py) while decode's prealloc queue holds it, so under load wider than "
    "decode's window a request that only queued fails at prefill's bootstrap timeout ('timed out after 6.0s "
    "in KVPoll.Bootstrapping', num_bootstrap_failed_reqs_total rises), and decode, not told, waits out its "
    "own waiting timeout for KV that will not come ('timed out after 6.0s in KVPoll.WaitingForInput'): the "
    "client learns after both, 12.6 s. smg retries plain requests (some then served) and charges every failed "
    "attempt to both workers' breakers. Real SGLang on CPU, 2026-12-07: 6 of 25 streams failed, 12 bootstrap "
    "failures; pdsim, which copies the clocks, 5 of 25 and 8. 0.5.23's mitigation, off by default: "
    "--disaggregation-decode-allocation-policy prefill_complete starts the clock when prefill is done. A race "
    "with the machine's speed: a third run on sglang-cpu served all 25, its prealloc queue held 7.5 s and more "
    "but no room past the timeout (not strict)"
)


@pytest.fixture(scope="module")
def stack(stack_factory):
    """This module's stack: the defaults' timeouts, scaled; a small decode."""
    with stack_factory.own(
        timeouts=DEFAULTS,
        max_running_requests=RUNNING,
        decode_ms_per_step=5.0,
        router_request_timeout_s=ROUTER_REQUEST_TIMEOUT_S,
    ) as target:
        yield target


@sglang_known("outcomes_in", SGLANG_CLOCKS_THE_QUEUE, evidence={"outcomes": ["clean_error"]}, strict=False)
@sglang_known("counter_never_rises", SGLANG_CLOCKS_THE_QUEUE, evidence={"after_fault": True}, strict=False)
@sglang_known(
    "charged_only_where_struck", SGLANG_CLOCKS_THE_QUEUE, evidence={"unstruck": ["prefill", "decode"]}, strict=False
)
def test_requests_that_only_queue_are_served_under_the_default_timeouts(scenario, workload, faults, bounds):
    """The queueing test of ``test_overload`` on the defaults' relation: each request queues
    in decode's prealloc, none meets a fault, so each must be served."""
    scenario.judge(
        v.outcomes_in(set(), phase=Phase.FAULT),
        v.counter_never_rises(
            PREFILL_BOOTSTRAP_FAILED, why="a request that only queued in decode's prealloc met no fault"
        ),
    )
    queue_past(
        scenario,
        workload,
        faults,
        bounds,
        past_s=bounds.bootstrap_s,
        timeout="bootstrap",
        note=f", bootstrap and waiting timeouts {DEFAULTS.bootstrap_s} s",
    )
