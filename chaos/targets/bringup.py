"""What every target does to tell a service is ready and to make the stack usable: the
readiness URLs, Toxiproxy's proxies, and one real request through the client's path.

Shared by the embedded, Compose and attach targets so that "ready" means the same on all.
"""

from __future__ import annotations

from typing import Callable

import httpx

from chaos.errors import TargetError
from chaos.system.topology import is_engine
from chaos.system.wait import HTTP_CALL_S, PROBE, http_ok, wait_until
from chaos.targets.stack import StackInfo
from chaos.targets.toxiproxy import ToxiproxyClient

__all__ = [
    "RANK_ROUTE",
    "create_proxies",
    "last_line",
    "rank_port",
    "ready_url",
    "served_model",
    "wait_ready",
    "warm_up",
]


def ready_url(info: StackInfo, service: str) -> str:
    e = info.endpoints
    if is_engine(service):
        return f"{e[service]}/health"
    return {"toxiproxy": f"{e.get('toxiproxy', '')}/version", "router": f"{e['router']}/readiness"}[service]


# Real SGLang's /health runs a one-token generation and waits 1 s before its first look at
# the result (http_server.py), so an engine probe must allow more than that; pdsim answers
# at once. The generation is kept (SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION stays true):
# it is what tells a live scheduler from a wedged one, for smg's checks too.
ENGINE_PROBE_S = 5.0


def wait_ready(
    info: StackInfo, service: str, *, alive: Callable[[], bool], why_dead: Callable[[], str], timeout_s: float
) -> None:
    """Until the service's readiness URL answers 200; fails at once if it exits meanwhile."""
    url = ready_url(info, service)

    def ready() -> bool:
        if not alive():
            raise TargetError(f"{service} exited during startup: {why_dead()}")
        return http_ok(url, timeout_s=ENGINE_PROBE_S if is_engine(service) else 1.0)

    wait_until(ready, timeout_s=timeout_s, what=f"{service} ready at {url}", interval_s=0.05)


def create_proxies(info: StackInfo) -> None:
    """(Re)create the stack's proxies with no toxics, whatever Toxiproxy held before."""
    with ToxiproxyClient(info.endpoints["toxiproxy"]) as tp:
        existing = tp.proxies()
        for name in info.proxies:
            p = info.proxies[name]
            if name in existing:
                tp.delete(name)
            tp.create(name, listen=p["listen"], upstream=p["upstream"])


def warm_up(info: StackInfo, *, timeout_s: float) -> None:
    """Real requests through the client's endpoint, as a user's first ones would go: one per
    prompt length of the stack's ``warm_up_words``, each retried until it succeeds. None where
    the stack names none (engines whose failure hooks fail every request: none could)."""
    url = f"{info.endpoints['client']}/generate"
    for words in info.config.get("warm_up_words", [2]):
        body: dict[str, object] = {"text": " ".join(["warm-up"] * int(words)), "sampling_params": {"max_new_tokens": 2}}

        def ok(body: dict[str, object] = body) -> bool:
            return PROBE.post(url, json=body, timeout=max(HTTP_CALL_S, timeout_s / 4)).status_code == 200

        wait_until(ok, timeout_s=timeout_s, what=f"a {words}-word request through {url} succeeds", interval_s=0.2)


def served_model(info: StackInfo) -> str:
    """The model name clients must send (smg answers 503 to any other): the stack's own, or
    for a deployment pd-chaos did not start, the first model the router lists."""
    model = info.config.get("model")
    if model:
        return str(model)
    reply = httpx.get(f"{info.endpoints['router']}/v1/models", timeout=HTTP_CALL_S)
    reply.raise_for_status()
    models = [str(m["id"]) for m in reply.json().get("data", [])]
    if not models:
        raise TargetError(f"{info.endpoints['router']}/v1/models lists no model")
    return models[0]


def last_line(log: str) -> str:
    """The last non-blank line of a log: what a service said before it died."""
    lines = [ln for ln in log.splitlines() if ln.strip()]
    return lines[-1] if lines else "(empty log)"


# rank 0's entry in a prefill's bootstrap server, as decode asks for it (SGLang's and pdsim's /route)
RANK_ROUTE = "/route?prefill_dp_rank=0&prefill_cp_rank=0&target_tp_rank=0&target_pp_rank=0"


def rank_port(bootstrap: str) -> int:
    """The port of prefill's control channel, as its bootstrap server (at URL ``bootstrap``)
    gives it to decode: SGLang's ZMQ port, picked at each start; pdsim's control address.
    Raises what the call or the reply's reading raises (httpx's errors, ValueError, KeyError)."""
    return int(httpx.get(bootstrap + RANK_ROUTE, timeout=HTTP_CALL_S).json()["rank_port"])
