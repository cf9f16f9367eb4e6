"""Helpers for the stack tests: talk to pdsim engines as smg does, and read their metrics."""

from __future__ import annotations

import asyncio
import random
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import httpx
from prometheus_client.parser import text_string_to_metric_families

from chaos.faults.network import enable_proxy, remove_toxic, toxiproxy_restarter
from chaos.system.topology import link_of
from chaos.system.wait import wait_until
from chaos.targets.embedded import EmbeddedStack
from chaos.targets.toxiproxy import Toxic

_rng = random.Random(1234)


@dataclass
class Leg:
    status: int | None
    body: Any
    text: str
    elapsed_s: float
    timed_out: bool = False


def pd_fields(stack: EmbeddedStack, room: int | None = None, prefill: str = "prefill") -> dict[str, Any]:
    """The fields smg injects: the bootstrap address is the proxied one of ``prefill``, as in the stack."""
    host, _, port = stack.info.proxies[link_of("bootstrap", prefill)]["listen"].rpartition(":")
    return {
        "bootstrap_host": host,
        "bootstrap_port": int(port),
        "bootstrap_room": room if room is not None else _rng.randrange(1 << 63),
    }


async def _post(client: httpx.AsyncClient, url: str, body: dict[str, Any]) -> Leg:
    t0 = time.monotonic()
    try:
        r = await client.post(url, json=body)
    except httpx.TimeoutException:
        return Leg(None, None, "", time.monotonic() - t0, timed_out=True)
    try:
        parsed = r.json()
    except ValueError:
        parsed = None
    return Leg(r.status_code, parsed, r.text, time.monotonic() - t0)


def send(
    stack: EmbeddedStack,
    path: str,
    body: dict[str, Any],
    *,
    legs: tuple[str, ...] = ("prefill", "decode"),
    timeout_s: float = 20.0,
    room: int | None = None,
    prefill: str = "prefill",
) -> dict[str, Leg]:
    """POST the same body (with PD fields naming ``prefill``'s bootstrap server) to the chosen
    engines at once, as smg does; ``legs`` name the engines, ``prefill`` among them."""
    full = {**body, **pd_fields(stack, room, prefill)}

    async def run() -> dict[str, Leg]:
        async with httpx.AsyncClient(timeout=httpx.Timeout(timeout_s, connect=2.0)) as client:
            results = await asyncio.gather(*(_post(client, stack.info.endpoints[leg] + path, full) for leg in legs))
        return dict(zip(legs, results, strict=True))

    return asyncio.run(run())


def metrics(url: str) -> dict[str, list[tuple[dict[str, str], float, str]]]:
    """name -> [(labels, value, family type)] from one scrape."""
    out: dict[str, list[tuple[dict[str, str], float, str]]] = {}
    text = httpx.get(url, timeout=2.0).text
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out.setdefault(s.name, []).append((s.labels, s.value, fam.type))
    return out


def gauge(stack: EmbeddedStack, engine: str, name: str) -> float:
    samples = metrics(stack.info.endpoints[engine] + "/metrics").get(f"sglang:{name}", [])
    return sum(v for _, v, _ in samples)


def background(fn: Callable[[], Any]) -> tuple[threading.Thread, dict[str, Any]]:
    """``fn`` on a daemon thread; its return value lands in the dict under ``value``."""
    out: dict[str, Any] = {}
    th = threading.Thread(target=lambda: out.update(value=fn()), daemon=True)
    th.start()
    return th, out


def decode_holds_a_room(stack: EmbeddedStack) -> None:
    """Wait until decode has sent a room's metadata and waits for its KV (its transfer queue)."""
    wait_until(
        lambda: gauge(stack, "decode", "num_decode_transfer_queue_reqs") >= 1,
        timeout_s=5,
        what="decode holding a room in its transfer queue",
    )


@contextmanager
def toxic(
    stack: EmbeddedStack, proxy: str, kind: str, *, stream: str = "downstream", **attributes: Any
) -> Iterator[None]:
    """A toxic for the duration of the block (without the rig's fault verification: these
    tests check pdsim, not the rig's faults), always removed by the rig's bounded heal."""
    name = f"test_{kind}_{stream}"
    with stack.toxiproxy() as tp:
        tp.add_toxic(proxy, Toxic(name, kind, stream, 1.0, attributes))  # type: ignore[arg-type]
        try:
            yield
        finally:
            remove_toxic(tp, proxy, name, restart_toxiproxy=toxiproxy_restarter(stack))


@contextmanager
def proxy_down(stack: EmbeddedStack, proxy: str) -> Iterator[None]:
    with stack.toxiproxy() as tp:
        tp.disable(proxy)
        try:
            yield
        finally:
            enable_proxy(tp, proxy, restart_toxiproxy=toxiproxy_restarter(stack))
