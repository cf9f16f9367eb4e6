"""What the sampler reads of the router: smg's page, and its worker list's live load counters
under the gauge's name, the gauge kept as their twin (chaos.observe.sampler)."""

from __future__ import annotations

import httpx

from chaos.observe.history import History
from chaos.observe.sampler import Sampler, merged, metrics_urls, parse_metrics, twin, worker_loads

ACTIVE = "smg_worker_requests_active"


def test_a_label_value_with_braces_keeps_the_page_readable():
    """smg labels a templated route by its template (``path="/workers/{worker_id}"``): the
    label set is cut at the brace after the name, not at one inside a value (the page was
    unreadable, every router sample lost, once any such route had been asked)."""
    page = (
        'smg_http_responses_total{path="/workers/{worker_id}",status_code="400",error_code=""} 1\n'
        'smg_http_requests_total{method="GET",path="/workers/{worker_id}"} 1\n'
        'smg_worker_requests_active{worker="http://p"} 2\n'
        'smg_router_ttft_seconds_count{model="m{1}",router="pd"} 3\n'
    )
    values = parse_metrics(page)
    assert values["smg_http_responses_total:serving"] == 1 and values["smg_http_requests_total"] == 1
    assert values[f"{ACTIVE}:http://p"] == 2 and values["smg_router_ttft_seconds_count"] == 3


def test_the_worker_lists_load_counters_stand_for_the_gauge():
    """Each worker's ``load`` in smg's ``/workers`` is the counter the gauge reports: it
    takes the gauge's name, per worker and summed, and what the gauge said is its twin."""
    listed = {"workers": [{"url": "http://p", "load": 0}, {"url": "http://d", "load": 1}], "total": 2}
    live = worker_loads(listed)
    assert live == {ACTIVE: 1.0, f"{ACTIVE}:http://p": 0.0, f"{ACTIVE}:http://d": 1.0}
    gauge = parse_metrics(f'{ACTIVE}{{worker="http://p"}} 1\n{ACTIVE}{{worker="http://d"}} 1\n')
    sample = merged([gauge, live])
    assert sample[f"{ACTIVE}:http://p"] == 0 and sample[twin(f"{ACTIVE}:http://p")] == 1
    assert sample[ACTIVE] == 1 and sample[twin(ACTIVE)] == 2
    assert metrics_urls({"prefill": "p", "decode": "d", "router_metrics": "m", "router_loads": "w"})["router"] == (
        "m",
        "w",
    )


def test_the_router_sample_holds_the_live_count_and_the_gauge(stack):
    """On the real smg: while a stream is open (300 tokens: 3 s on pdsim), decode's live
    count and its gauge read 1 (prefill's leg has ended); once it has, every worker's read 0."""
    endpoints = stack.info.endpoints
    body = {
        "model": stack.info.config["model"],
        "prompt": "a b c",
        "max_tokens": 300,
        "ignore_eos": True,
        "stream": True,
    }
    workers = [f"{ACTIVE}:{endpoints[e]}" for e in ("prefill", "decode")]
    with Sampler(History(), {"router": metrics_urls(endpoints)["router"]}) as sampler:
        with httpx.stream("POST", endpoints["router"] + "/v1/completions", json=body, timeout=10) as reply:
            opened = sampler.history.now()
            assert sum(1 for line in reply.iter_lines() if line.startswith("data:")) > 300
            ended = sampler.history.now()
        assert sampler.poll(
            lambda: (
                (s := sampler.latest("router")) is not None
                and all(s.values.get(n) == 0 for w in workers for n in (w, twin(w)))
            ),
            timeout_s=5,
        ), sampler.latest("router")
    h = sampler.history
    for name in (workers[1], twin(workers[1])):
        during = [v for t, v in h.series("router", name) if opened + 0.5 < t < ended - 0.5]
        assert during and set(during) == {1.0}, (name, during)
