"""``/metrics`` with SGLang's names, types and labels (``observability/metrics_collector.py``).

Scheduler gauges carry ``model_name, engine_type, tp_rank, pp_rank, moe_ep_rank``; the
tokenizer-side counters and histograms carry ``model_name`` (and ``is_streaming`` where
SGLang has it). Unlike SGLang, pdsim refreshes its gauges on every scheduler iteration.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

__all__ = ["EngineMetrics"]

_SCHED = ("model_name", "engine_type", "tp_rank", "pp_rank", "moe_ep_rank")
_LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)
_STAGES = (
    "prefill_bootstrap",
    "prefill_forward",
    "prefill_transfer_kv_cache",
    "decode_prepare",
    "decode_bootstrap",
    "decode_waiting",
    "decode_transferred",
)


class EngineMetrics:
    """One registry per engine process; ``set_queues`` is called every scheduler tick."""

    def __init__(self, model_name: str, engine_type: str) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self._sched = {
            "model_name": model_name,
            "engine_type": engine_type,
            "tp_rank": "0",
            "pp_rank": "0",
            "moe_ep_rank": "0",
        }
        self._model = model_name

        def gauge(name: str, doc: str) -> Gauge:
            return Gauge(f"sglang:{name}", doc, _SCHED, registry=r, multiprocess_mode="mostrecent")

        def counter(name: str, doc: str) -> Counter:
            return Counter(f"sglang:{name}", doc, _SCHED, registry=r)

        self.num_running_reqs = gauge("num_running_reqs", "The number of running requests.")
        self.num_queue_reqs = gauge("num_queue_reqs", "The number of requests in the waiting queue.")
        self.num_grammar_queue_reqs = gauge(
            "num_grammar_queue_reqs", "The number of requests in the grammar waiting queue."
        )
        self.num_used_tokens = gauge("num_used_tokens", "The number of used tokens.")
        self.token_usage = gauge("token_usage", "The token usage.")
        self.max_total_num_tokens = gauge("max_total_num_tokens", "Maximum total number of tokens in the KV pool.")
        self.gen_throughput = gauge("gen_throughput", "The generation throughput (token/s).")
        self.cache_hit_rate = gauge("cache_hit_rate", "The prefix cache hit rate.")
        self.utilization = gauge("utilization", "The utilization.")
        self.prefill_bootstrap = gauge(
            "num_prefill_bootstrap_queue_reqs", "The number of requests in the prefill bootstrap queue."
        )
        self.prefill_inflight = gauge(
            "num_prefill_inflight_queue_reqs", "The number of requests in the prefill inflight queue."
        )
        self.decode_prealloc = gauge(
            "num_decode_prealloc_queue_reqs", "The number of requests in the decode prealloc queue."
        )
        self.decode_transfer = gauge(
            "num_decode_transfer_queue_reqs", "The number of requests in the decode transfer queue."
        )
        self.bootstrap_failed = counter("num_bootstrap_failed_reqs", "The number of bootstrap failed requests.")
        self.transfer_failed = counter("num_transfer_failed_reqs", "The number of transfer failed requests.")
        self.per_stage = Histogram(
            "sglang:per_stage_req_latency_seconds",
            "The latency of each stage of requests.",
            (*_SCHED, "stage"),
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        tok = ("model_name", "engine_type", "is_streaming")  # as SGLang 0.5.23 labels them
        self.prompt_tokens = Counter("sglang:prompt_tokens", "Number of prefill tokens processed.", tok, registry=r)
        self.generation_tokens = Counter(
            "sglang:generation_tokens", "Number of generation tokens processed.", tok, registry=r
        )
        self.num_requests = Counter("sglang:num_requests", "Number of requests processed.", tok, registry=r)
        self.num_aborted = Counter(
            "sglang:num_aborted_requests", "Number of requests aborted.", ("model_name", "engine_type"), registry=r
        )
        self.ttft = Histogram(
            "sglang:time_to_first_token_seconds",
            "Histogram of time to first token in seconds.",
            tok,
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.e2e = Histogram(
            "sglang:e2e_request_latency_seconds",
            "Histogram of End-to-end request latency in seconds",
            tok,
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.itl = Histogram(
            "sglang:inter_token_latency_seconds",
            "Histogram of inter-token latency in seconds.",
            ("model_name", "engine_type"),
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        for g in (self.num_grammar_queue_reqs, self.cache_hit_rate):
            g.labels(**self._sched).set(0)
        # the failure counters have no series until their first increment, as in SGLang
        # 0.5.9 and 0.5.23 (a labelled counter appears at its first .labels().inc())
        for stage in _STAGES:
            self.per_stage.labels(**self._sched, stage=stage)

    def set_queues(
        self,
        *,
        running: int,
        queue: int,
        used_tokens: int,
        pool_tokens: int,
        gen_throughput: float,
        prefill_bootstrap: int = 0,
        prefill_inflight: int = 0,
        decode_prealloc: int = 0,
        decode_transfer: int = 0,
    ) -> None:
        s = self._sched
        self.num_running_reqs.labels(**s).set(running)
        self.num_queue_reqs.labels(**s).set(queue)
        self.num_used_tokens.labels(**s).set(used_tokens)
        self.token_usage.labels(**s).set(used_tokens / pool_tokens if pool_tokens else 0.0)
        self.max_total_num_tokens.labels(**s).set(pool_tokens)
        self.gen_throughput.labels(**s).set(gen_throughput)
        self.utilization.labels(**s).set(min(1.0, running / 64))
        self.prefill_bootstrap.labels(**s).set(prefill_bootstrap)
        self.prefill_inflight.labels(**s).set(prefill_inflight)
        self.decode_prealloc.labels(**s).set(decode_prealloc)
        self.decode_transfer.labels(**s).set(decode_transfer)

    def stage(self, stage: str, seconds: float) -> None:
        self.per_stage.labels(**self._sched, stage=stage).observe(seconds)

    def count_failure(self, *, bootstrap: bool) -> None:
        (self.bootstrap_failed if bootstrap else self.transfer_failed).labels(**self._sched).inc()

    def finished(self, *, streaming: bool, prompt: int, generated: int, ttft_s: float | None, e2e_s: float) -> None:
        lab = {"model_name": self._model, "engine_type": self._sched["engine_type"], "is_streaming": str(streaming)}
        self.num_requests.labels(**lab).inc()
        self.prompt_tokens.labels(**lab).inc(prompt)
        self.generation_tokens.labels(**lab).inc(generated)
        if ttft_s is not None:
            self.ttft.labels(**lab).observe(ttft_s)
        self.e2e.labels(**lab).observe(e2e_s)

    def inter_token(self, seconds: float) -> None:
        self.itl.labels(model_name=self._model, engine_type=self._sched["engine_type"]).observe(seconds)

    def aborted(self) -> None:
        self.num_aborted.labels(model_name=self._model, engine_type=self._sched["engine_type"]).inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)
