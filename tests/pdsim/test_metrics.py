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
    for name in COUNTERS:  # no series before the first failure, as in SGLang; test_timeouts sees them appear
        for labels, value, kind in m.get(f"sglang:{name}", []):
            assert kind == "counter" and set(labels) == SCHED_LABELS and value >= 1


@pytest.mark.parametrize("engine", ["prefill", "decode"])
def test_request_counters_and_latency_histograms(stack, engine):
    m = metrics(stack.info.endpoints[engine] + "/metrics")  # the stack's warm-up request counted
    for name in ("sglang:num_requests_total", "sglang:prompt_tokens_total", "sglang:generation_tokens_total"):
        labels, value, kind = m[name][0]
        assert kind == "counter" and set(labels) == {"model_name", "engine_type", "is_streaming"} and value >= 1
    assert "sglang:e2e_request_latency_seconds_bucket" in m
    # SGLang's PD prefill never observes TTFT; decode does (tokenizer_manager.py, 0.5.23)
    assert ("sglang:time_to_first_token_seconds_bucket" in m) == (engine == "decode")
    stages = {labels["stage"] for labels, _, _ in m["sglang:per_stage_req_latency_seconds_count"]}
    assert {"prefill_bootstrap", "decode_transferred"} <= stages


def test_sglang_loads_read_as_the_queue_gauges():
    """SGLang 0.5.23's /v1/loads (Prometheus form) under the names the suites read: its live
    counts win over the same gauges of /metrics in one sample, and what /metrics said of them
    is kept beside, as their twin (chaos.observe.sampler), for ``sources_agree`` to judge."""
    from chaos.observe.sampler import merged, metrics_urls, parse_metrics, twin

    loads = parse_metrics(
        'sglang_num_running_reqs{dp_rank="0"} 1\n'
        'sglang_disagg_decode_transfer_queue_reqs{dp_rank="0"} 2\n'
        'sglang_disagg_prefill_inflight_queue_reqs{dp_rank="0"} 3\n'
    )
    assert loads == {
        "num_running_reqs": 1.0,
        "num_decode_transfer_queue_reqs": 2.0,
        "num_prefill_inflight_queue_reqs": 3.0,
    }
    stale = parse_metrics(
        'sglang:num_decode_transfer_queue_reqs{model_name="m"} 0\nsglang:gen_throughput{model_name="m"} 5\n'
    )
    assert merged([stale, loads]) == loads | {"gen_throughput": 5.0, twin("num_decode_transfer_queue_reqs"): 0.0}
    assert merged([stale]) == stale and merged([]) == {}  # one page: nothing to hold it to
    ends = {
        "prefill": "http://127.0.0.1:1",
        "decode": "http://127.0.0.1:2",
        "router_metrics": "http://127.0.0.1:3/metrics",
    }
    assert metrics_urls(ends)["decode"] == ("http://127.0.0.1:2/metrics",)
    assert metrics_urls(
        ends | {"prefill_loads": "http://127.0.0.1:1/v1/loads", "decode_loads": "http://127.0.0.1:2/v1/loads"}
    )["decode"] == ("http://127.0.0.1:2/metrics", "http://127.0.0.1:2/v1/loads")


def test_smg_breaker_series_per_worker_and_outcome():
    """smg's breaker outcomes and transitions are kept per worker and per outcome or state
    entered, besides the per-worker sum (chaos.observe.sampler)."""
    from chaos.observe.sampler import parse_metrics

    m = parse_metrics(
        'smg_worker_cb_outcomes_total{worker="http://w",outcome="success"} 4\n'
        'smg_worker_cb_outcomes_total{worker="http://w",outcome="failure"} 2\n'
        'smg_worker_cb_transitions_total{worker="http://w",from="closed",to="open"} 1\n'
        'smg_worker_cb_transitions_total{worker="http://w",from="half_open",to="open"} 1\n'
        'smg_worker_cb_transitions_total{worker="http://w",from="open",to="half_open"} 1\n'
    )
    assert m["smg_worker_cb_outcomes_total:http://w"] == 6 and m["smg_worker_cb_outcomes_total:http://w:failure"] == 2
    assert (
        m["smg_worker_cb_transitions_total:http://w:open"] == 2
        and m["smg_worker_cb_transitions_total:http://w:half_open"] == 1
    )


def test_a_histogram_keeps_its_sum_and_count_without_its_buckets():
    """The sampler cuts bucket, _created and comment lines, and label sets it sums over,
    before parsing (they cost four fifths of its time on SGLang's pages); labels it keeps
    values apart by stay."""
    from chaos.observe.sampler import parse_metrics

    page = (
        "# HELP sglang:e2e_request_latency_seconds Histogram of end-to-end request latency.\n"
        "# TYPE sglang:e2e_request_latency_seconds histogram\n"
        'sglang:e2e_request_latency_seconds_bucket{le="0.1",model_name="m"} 1.0\n'
        'sglang:e2e_request_latency_seconds_bucket{le="+Inf",model_name="m"} 3.0\n'
        'sglang:e2e_request_latency_seconds_count{model_name="m"} 3.0\n'
        'sglang:e2e_request_latency_seconds_sum{model_name="m"} 0.9\n'
        "sglang:e2e_request_latency_seconds_created 1.7e9\n"
        "# TYPE sglang:num_running_reqs gauge\n"
        'sglang:num_running_reqs{model_name="m",tp_rank="0"} 2.0\n'
        'sglang:num_running_reqs{model_name="m",tp_rank="1"} 1.0\n'
        'smg_http_requests_total{method="GET",path="/metrics"} 4\n'
    )
    assert parse_metrics(page) == {
        "e2e_request_latency_seconds_count": 3.0,
        "e2e_request_latency_seconds_sum": 0.9,
        "num_running_reqs": 3.0,
        "smg_http_requests_total": 4.0,
        "smg_http_requests_total:probe": 4.0,
    }
