"""Faults on the engine-to-engine links: slow must be told apart from stuck.

Bug classes: decode receivers stuck in Transferring that never time out (sglang PR
#31800); a prefill-side failure not told to decode, which then holds its slot until its
own timeout (PR #28651); streams that end with no error event when the server gives up.
Fault model: Toxiproxy ``latency`` and ``bandwidth`` (slow), ``timeout`` (blackhole) and
a crawl that lets the transfer start but never finish (stuck), and the kv link down. The
kv link is TCP in pdsim; with RDMA transfers (real SGLang) it cannot be proxied and these
tests skip.
"""

from __future__ import annotations

import pytest

from chaos import verdicts as v
from chaos.workloads import Deadlines
from suites.conftest import ENGINE_QUEUES, ROUTER_INFLIGHT, aftermath

pytestmark = [pytest.mark.fault("network"), pytest.mark.needs("proxied_kv")]

LONG = dict(words_per_round=300)  # about 300 KB of KV per request


def _deadlines(bounds) -> Deadlines:
    return Deadlines(read_s=bounds.inflight_s + bounds.slack_s, stall_s=bounds.inflight_s + bounds.slack_s, total_s=bounds.router_timeout_s)


def test_slow_kv_link_is_not_stuck(stack, history, sampler, workload, faults, bounds):
    workload.conversations(agents=3, rounds=1, **LONG, phase="baseline").run()
    with faults.latency("kv", 300, stream="upstream"), faults.bandwidth("kv", 2000, stream="upstream"):
        workload.conversations(agents=3, rounds=1, **LONG, deadlines=_deadlines(bounds), phase="fault").run()
    v.expect(
        history,
        v.outcomes_in(set()),
        v.counter_never_rises("decode", "num_transfer_failed_reqs_total", why="slow is not stuck"),
        v.counter_never_rises("prefill", "num_transfer_failed_reqs_total", why="slow is not stuck"),
        v.replies_match_baseline(),
    )


@pytest.mark.parametrize("stall", ["blackhole", "crawl"])
def test_stuck_kv_transfer_times_out_on_decode(stack, history, sampler, workload, faults, bounds, stall):
    """blackhole: no KV byte arrives (WaitingForInput); crawl: 1 KB/s lets the transfer
    begin and never finish (Transferring). Either way decode's waiting timeout fails the
    room and aborts prefill's, long before the inflight watchdog."""
    fault = faults.blackhole("kv", stream="upstream") if stall == "blackhole" else faults.bandwidth("kv", 1, stream="upstream")
    with fault:
        workload.conversations(agents=3, rounds=1, **LONG, deadlines=_deadlines(bounds), phase="fault").run()
    after = aftermath(workload, sampler, bounds, gauges=ENGINE_QUEUES + ROUTER_INFLIGHT, within_s=bounds.slack_s + 1)
    v.expect(
        history,
        v.every_request_terminal(within_s=bounds.waiting_s + 2 * bounds.slack_s),
        v.failed_requests_are_clean(within_s=bounds.waiting_s + bounds.slack_s),
        v.watchdog_fired("decode waiting", source="decode", counter="num_transfer_failed_reqs_total", timeout_s=bounds.waiting_s, slack_s=bounds.slack_s),
        *after,
    )


def test_kv_link_down_fails_both_legs_at_once(stack, history, sampler, workload, faults, bounds):
    """Prefill cannot connect to decode: it fails the room at once and must tell decode,
    which would otherwise hold the slot until its waiting timeout."""
    with faults.down("kv"):
        workload.conversations(agents=3, rounds=1, deadlines=_deadlines(bounds), phase="fault").run()
    after = aftermath(workload, sampler, bounds, gauges=ENGINE_QUEUES + ROUTER_INFLIGHT, within_s=bounds.slack_s + 1)
    v.expect(
        history,
        v.failed_requests_are_clean(within_s=bounds.forward_s + bounds.slack_s),
        *after,
    )
