"""``/metrics`` names, types and labels match shared/reference/sglang-pd-protocol.md §3."""

from __future__ import annotations

import pytest

from tests.pdpair import metrics

SCHED_LABELS = {"model_name", "engine_type", "tp_rank", "pp_rank", "moe_ep_rank"}
GAUGES = [
    "num_running_reqs",
    "num_queue_reqs",
    "num_grammar_queue_reqs",
    "token_usage",
    "num_used_tokens",
    "gen_throughput",
    "cache_hit_rate",
    "utilization",
    "max_total_num_tokens",
    "num_prefill_bootstrap_queue_reqs",
    "num_prefill_inflight_queue_reqs",
    "num_decode_prealloc_queue_reqs",
    "num_decode_transfer_queue_reqs",
]
COUNTERS = ["num_bootstrap_failed_reqs_total", "num_transfer_failed_reqs_total"]


@pytest.mark.parametrize("engine", ["prefill", "decode"])
def test_scheduler_gauges_and_pd_counters(stack, engine):
    m = metrics(stack.info.endpoints[engine] + "/metrics")
    for name in GAUGES:
        samples = m[f"sglang:{name}"]
        labels, _, kind = samples[0]
        assert kind == "gauge", name
        assert set(labels) == SCHED_LABELS, name
        assert labels["engine_type"] == engine
    for name in COUNTERS:
        labels, value, kind = m[f"sglang:{name}"][0]
        assert kind == "counter" and set(labels) == SCHED_LABELS and value >= 0


@pytest.mark.parametrize("engine", ["prefill", "decode"])
def test_request_counters_and_latency_histograms(stack, engine):
    m = metrics(stack.info.endpoints[engine] + "/metrics")  # the stack's warm-up request counted
    for name in ("sglang:num_requests_total", "sglang:prompt_tokens_total", "sglang:generation_tokens_total"):
        labels, value, kind = m[name][0]
        assert kind == "counter" and set(labels) == {"model_name", "is_streaming"} and value >= 1
    for name in ("sglang:e2e_request_latency_seconds", "sglang:time_to_first_token_seconds"):
        assert any(n == name + "_bucket" for n in m), name
    stages = {labels["stage"] for labels, _, _ in m["sglang:per_stage_req_latency_seconds_count"]}
    assert {"prefill_bootstrap", "decode_transferred"} <= stages
