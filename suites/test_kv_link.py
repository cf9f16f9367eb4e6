"""Faults on the engine-to-engine links: slow must be told apart from stuck.

Bug classes: decode receivers stuck in Transferring that never time out (sglang PR
#31800); a prefill-side failure not told to decode, which then holds its slot until its
own timeout (PR #28651); streams that end with no error event when the server gives up.
Fault model: latency and bandwidth (slow), a blackhole and a crawl that lets the transfer
start but never finish (stuck), the kv link down, and (on packet links) packets sent twice
and out of order. The kv link is Toxiproxy's in pdsim
and packet rules in the stack's own namespace on sglang-cpu; with RDMA transfers it cannot
be reached and these tests skip. Corrupted KV: test_kv_corruption.py.
"""

from __future__ import annotations

import pytest

from chaos import verdicts as v
from chaos.clients.client import Deadlines
from chaos.observe.pipeline import DECODE_TRANSFER_FAILED, ENGINE_QUEUES, ROUTER_INFLIGHT, Metric
from chaos.observe.records import Phase
from chaos.targets.base import Capability
from chaos.upstream import deferred_kv_release, failed_kv_held_till_next_request

pytestmark = [pytest.mark.fault("network"), pytest.mark.needs("kv_link")]

LONG = dict(words_per_round=300)  # about 300 KB of KV per request


def _deadlines(bounds) -> Deadlines:
    return Deadlines(
        read_s=bounds.inflight_s + bounds.slack_s,
        stall_s=bounds.inflight_s + bounds.slack_s,
        total_s=bounds.router_timeout_s,
    )


def _no_transfer_fails(*, why: str) -> list[v.Check]:
    """Neither engine counts a failed transfer: a link that is slow, or that repeats and
    reorders packets, is no failure of a transfer."""
    return [
        v.counter_never_rises(Metric(engine, "num_transfer_failed_reqs_total"), why=why)
        for engine in ("decode", "prefill")
    ]


@pytest.mark.needs("link_delay")
def test_slow_kv_link_is_not_stuck(scenario, workload, faults, bounds):
    """A slow KV link must not be taken for a stuck one: every request is served, as the
    fault-free baseline was, and no watchdog fails a transfer. How slow: Mooncake's TCP
    transfer of 300 KB costs about ten round trips of the link, and three to one decode go
    one after another (docs/known-issues.md), so a delay of the waiting timeout / 60 on each
    packet keeps three transfers within half that timeout; the link is shaped to 2 MB/s too."""
    delay_ms = round(bounds.waiting_s * 1000 / 60)
    scenario.baseline(agents=3, rounds=1, **LONG)
    scenario.judge(
        v.outcomes_in(set()),
        *_no_transfer_fails(why="slow is not stuck"),
        v.replies_match_baseline(),
    )
    with faults.latency("kv", delay_ms, stream="upstream"), faults.bandwidth("kv", 2000, stream="upstream"):
        workload.conversations(agents=3, rounds=1, **LONG, deadlines=_deadlines(bounds)).run()
    # half the delay: the transfer overlaps with what the request waits for besides it
    scenario.require(v.requests_slowed(by_s=delay_ms / 2000, why="each request's KV crossed the delayed link"))


@pytest.mark.needs("link_duplicate")
def test_duplicated_reordered_kv_packets_change_nothing(scenario, workload, faults, bounds):
    """Packets of the KV sent twice and out of order must change nothing a client sees:
    decode's TCP drops the copies and puts the rest back in order, so every request is served
    as the fault-free baseline was and no transfer fails. A fifth of the packets go twice,
    and each packet and copy is held 2 ± 2 ms, so back-to-back packets cross."""
    scenario.baseline(agents=3, rounds=1, **LONG)
    scenario.judge(
        v.outcomes_in(set()),
        *_no_transfer_fails(why="copies are not failures"),
        v.replies_match_baseline(),
    )
    with faults.duplicate("kv", 0.2, delay_ms=2, jitter_ms=2):
        workload.conversations(agents=3, rounds=1, **LONG, deadlines=_deadlines(bounds)).run()
    scenario.require(
        v.fault_did("echoed", why="copies of the KV's packets came back through the rule on their way to decode"),
        v.fault_did("reordered", why="packets of the KV crossed on their way"),
    )


# SGLang 0.5.23's two pages of counts disagree while decode holds the rooms: what this
# known issue covers, figure by figure (a lie on any other count is not excused)
PAGES_DISAGREE = (
    "an engine's /metrics and /v1/loads disagree on the counts of a stalled transfer: decode's "
    "/metrics queue and KV gauges change only when its scheduler logs a batch, so while no batch "
    "runs they keep old values (its transfer queue and used tokens read 0 while /v1/loads reads "
    "the rooms waiting), and prefill's /metrics counts one request in its inflight queue and one "
    "KV token more than its /v1/loads does while the transfers are held (4 and 3301 against 3 "
    "and 3300 in both runs of 2026-12-06; unexplained). Evidence: the disagreeing figures are these four"
)
PAGES_DISAGREE_ON = [
    "decode:num_decode_transfer_queue_reqs",
    "decode:num_used_tokens",
    "prefill:num_prefill_inflight_queue_reqs",
    "prefill:num_used_tokens",
]


@pytest.mark.smoke
@pytest.mark.parametrize("stall", ["blackhole", "crawl"])
# sglang-cpu 2026-12-06, blackhole, twice in a day: one room's KV (1111 and 1125 tokens) held
# past quiet while every queue was back to 0, freed when the probe was served; other runs free
# every room at once
@failed_kv_held_till_next_request
@pytest.mark.known_issue(
    "sources_agree",
    component="SGLang",
    version="0.5.23",
    behaviour=PAGES_DISAGREE,
    evidence={"figures": PAGES_DISAGREE_ON},
    lacking="live_metrics_page",
)
def test_stuck_kv_transfer_times_out_on_decode(scenario, workload, faults, bounds, stall):
    """blackhole: no KV byte arrives (WaitingForInput); crawl: 1 KB/s lets the transfer
    begin and never finish (Transferring). Either way decode's waiting timeout fails the
    room and aborts prefill's, long before the inflight watchdog. The requests judged are
    those sent into the fault: after a blackhole on a real KV link (TCP), the first request
    may wait for TCP's retransmission timer, grown during the outage, before its KV moves,
    which is for ``recovers`` to judge, not a failure of the fault's requests. While decode
    holds the rooms, each engine's two pages of counts (/metrics, /v1/loads) must agree: a
    load report that leaves the waiting rooms out shows a stuck decode as idle."""
    if scenario.has(Capability.LIVE_QUEUE_GAUGES):  # the engines serve both pages
        scenario.judge(v.sources_agree())
    scenario.judge(
        v.every_request_terminal(within_s=bounds.waiting_s + 2 * bounds.slack_s),
        v.failed_requests_are_clean(within_s=bounds.waiting_s + bounds.slack_s, phase=Phase.FAULT),
        v.statuses_tell_the_truth(),  # decode's waiting timeout released them: told as a timeout
        v.watchdog_fired(
            "decode waiting",
            DECODE_TRANSFER_FAILED,
            timeout_s=bounds.waiting_s,
            slack_s=bounds.slack_s,
            since=v.Since.REQUEST,
        ),
    )
    fault = (
        faults.blackhole("kv", stream="upstream")
        if stall == "blackhole"
        else faults.bandwidth("kv", 1, stream="upstream")
    )
    with fault:
        workload.conversations(agents=3, rounds=1, **LONG, deadlines=_deadlines(bounds)).run()
    scenario.settle(ENGINE_QUEUES + ROUTER_INFLIGHT, within_s=bounds.quiet_s)


@deferred_kv_release
def test_kv_link_down_fails_both_legs_at_once(scenario, workload, faults, bounds):
    """Prefill cannot connect to decode: it fails the room at once and must tell decode,
    which would otherwise hold the slot until its waiting timeout."""
    scenario.judge(v.failed_requests_are_clean(within_s=bounds.abort_s), v.backstops_stay_idle(phase=Phase.FAULT))
    with faults.down("kv"):
        workload.conversations(agents=3, rounds=1, deadlines=_deadlines(bounds)).run()
    scenario.settle(ENGINE_QUEUES + ROUTER_INFLIGHT, within_s=bounds.quiet_s)
