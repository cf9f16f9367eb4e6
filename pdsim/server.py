"""SGLang's HTTP API (``entrypoints/http_server.py``) in front of either engine.

A client disconnect cancels the handler (aiohttp ``handler_cancellation``) or breaks a
stream write; either way the request is aborted and frees what it held, as SGLang's
``create_abort_task`` does.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from pdsim.config import EngineConfig, Mode
from pdsim.engine import Engine
from pdsim.environ import env_bool, env_int
from pdsim.request import BadRequest, Endpoint, Req, parse_request
from pdsim.responses import SSE_DONE, error_body, final_body, stream_abort_event, stream_chunks

__all__ = ["Api", "build_app", "relay"]


_DISAGG_QUEUES = (
    "prefill_bootstrap_queue_reqs",
    "prefill_inflight_queue_reqs",
    "decode_prealloc_queue_reqs",
    "decode_transfer_queue_reqs",
    "decode_retracted_queue_reqs",
)


def _json(obj: Any, status: int = 200) -> web.Response:
    return web.json_response(obj, status=status, dumps=lambda o: json.dumps(o, separators=(",", ":")))


class Api:
    """The engine's HTTP endpoints, each a method: SGLang 0.5.23's answers, shapes and
    status codes, for what smg and the suites ask."""

    def __init__(self, engine: Engine, cfg: EngineConfig) -> None:
        self.engine, self.cfg = engine, cfg
        self.started = time.time()
        self.truncate_to = cfg.truncate_tokens if cfg.behaviour.truncates_context else None
        self.health_timeout_s = env_int("SGLANG_HEALTH_CHECK_TIMEOUT", 20)  # SGLang reads it once, at import

    async def health(self, request: web.Request) -> web.Response:
        """SGLang 0.5.23's /health: with SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION (the
        default) it waits a second, then once a second, for the scheduler to have done
        anything since the probe came, up to SGLANG_HEALTH_CHECK_TIMEOUT; so even a healthy
        engine answers after at least 1 s. /health_generate always does."""
        if self.engine.draining:  # SGLang: "Health check request received during shutdown. Returning 503."
            return web.Response(status=503, text="")
        if request.path == "/health" and not env_bool("SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION", True):
            return web.Response(text="")
        tic = time.monotonic()
        while time.monotonic() < tic + self.health_timeout_s:
            await asyncio.sleep(1)
            if self.engine.last_tick > tic:
                return web.Response(text="")
        return web.Response(status=503, text="")

    async def server_info(self, _: web.Request) -> web.Response:
        cfg = self.cfg
        return _json(
            {
                "model_path": cfg.model,
                "served_model_name": cfg.model,
                "tokenizer_path": cfg.model,
                "host": cfg.host,
                "port": cfg.port,
                "disaggregation_mode": cfg.mode.value,
                "disaggregation_bootstrap_port": cfg.bootstrap_port,
                "disaggregation_transfer_backend": "pdsim",
                "tp_size": 1,
                "dp_size": 1,
                "max_running_requests": cfg.max_running_requests,
                "max_total_num_tokens": cfg.max_total_num_tokens,
                "context_length": cfg.context_len,
                "version": "0.5.0-pdsim",
                "internal_states": [
                    {
                        "last_gen_throughput": 0.0,
                        "memory_usage": {"token_usage": self.engine.used_tokens / cfg.kv_pool_tokens},
                    }
                ],
            }
        )

    async def model_info(self, _: web.Request) -> web.Response:
        return _json(
            {
                "model_path": self.cfg.model,
                "tokenizer_path": self.cfg.model,
                "is_generation": True,
                "preferred_sampling_params": None,
                "weight_version": "default",
                "has_image_understanding": False,
                "has_audio_understanding": False,
                "model_type": "pdsim",
                "architectures": ["PdsimForCausalLM"],
            }
        )

    async def models(self, _: web.Request) -> web.Response:
        cfg = self.cfg
        return _json(
            {
                "object": "list",
                "data": [
                    {
                        "id": cfg.model,
                        "object": "model",
                        "created": int(self.started),
                        "owned_by": "sglang",
                        "root": cfg.model,
                        "max_model_len": cfg.max_total_num_tokens,
                    }
                ],
            }
        )

    async def loads(self, request: web.Request) -> web.Response:
        """SGLang 0.5.23's /v1/loads: JSON by default, Prometheus text with
        ``format=prometheus`` (every number a gauge named ``sglang_<key>``, a section's
        ``sglang_<section>_<key>``); ``include`` picks sections (core, disagg; default all).
        Live, as SGLang's is: its scheduler publishes at least every 50 ms while a queue waits."""
        engine, cfg = self.engine, self.cfg
        c = engine.loads()
        core = {
            "num_running_reqs": c["running"],
            "num_waiting_reqs": c["waiting"],
            "num_total_reqs": c["total"],
            "num_used_tokens": engine.used_tokens,
            "max_total_num_tokens": cfg.kv_pool_tokens,
            "token_usage": engine.used_tokens / cfg.kv_pool_tokens,
            "gen_throughput": 0.0,
            "cache_hit_rate": 0.0,
            "utilization": 0.0,
            "max_running_requests": cfg.max_running_requests,
        }
        disagg = {q: c.get(q, 0) for q in _DISAGG_QUEUES}
        include = {part.strip() for part in request.query.get("include", "all").split(",")}
        load: dict[str, Any] = {"dp_rank": 0}
        if include & {"all", "core"}:
            load |= core
        if include & {"all", "disagg"}:
            load["disaggregation"] = disagg
        if request.query.get("format") == "prometheus":
            gauges = {f"sglang_{k}": v for k, v in load.items() if k not in ("dp_rank", "disaggregation")}
            gauges |= {f"sglang_disagg_{k}": v for k, v in load.get("disaggregation", {}).items()}
            text = "".join(f'# TYPE {name} gauge\n{name}{{dp_rank="0"}} {v}\n' for name, v in gauges.items())
            return web.Response(text=text, content_type="text/plain", charset="utf-8")
        return _json(
            {"timestamp": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "dp_rank_count": 1, "loads": [load]}
        )

    async def metrics(self, _: web.Request) -> web.Response:
        return web.Response(body=self.engine.metrics.render(), content_type="text/plain", charset="utf-8")

    async def abort_request(self, request: web.Request) -> web.Response:
        body = await _body(request) or {}
        self.engine.abort_matching(str(body.get("rid") or ""), bool(body.get("abort_all", False)))
        return web.Response(text="")

    async def flush_cache(self, _: web.Request) -> web.Response:
        if self.engine.is_idle():
            self.engine.flush_cache()
            return web.Response(
                text="Cache flushed.\nPlease check backend logs for more details. (When there are running or waiting requests, the operation will not be performed.)\n"
            )
        return web.Response(status=400, text="Cache not flushed. Please check backend logs for more details.")

    async def kv_corruption(self, request: web.Request) -> web.Response:
        """pdsim's own test hook (no SGLang endpoint): prefill's sender-side KV corruption
        (``pdsim.kvcheck.Corruption``). GET reads it; POST ``{"prob": p}`` sets it. Both
        answer the chance and the bytes flipped so far."""
        corruption = getattr(self.engine, "corruption", None)
        if corruption is None:
            return _json({"error": "only prefill sends KV"}, status=404)
        if request.method == "POST":
            body = await _body(request)
            prob = body.get("prob") if isinstance(body, dict) else None
            if not isinstance(prob, (int, float)) or not 0 <= prob <= 1:
                return _json({"error": f"prob must be a number in [0, 1], not {prob!r}"}, status=400)
            corruption.prob = float(prob)
        return _json({"prob": corruption.prob, "corrupted": corruption.corrupted})

    def serving(self, endpoint: Endpoint) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
        """The handler of one generation endpoint: the request parsed and submitted, then
        answered whole or streamed; aborted if its client went away before the end."""
        engine, cfg = self.engine, self.cfg

        async def handle(request: web.Request) -> web.StreamResponse:
            body = await _body(request)
            try:
                req = parse_request(
                    endpoint,
                    body,
                    model=cfg.model,
                    truncate_to=self.truncate_to,
                    context_len=cfg.context_len,
                    check_sampling=cfg.behaviour.sampling_checked,
                )
                req.client_id = request.headers.get("x-request-id")
                engine.submit(req)
            except (BadRequest, TypeError, ValueError) as exc:
                status = cfg.behaviour.client_error_status
                return _json(error_body(endpoint, status, str(exc)), status=status)
            try:
                if req.stream:
                    return await _stream(request, engine, req)
                return await _unary(engine, req)
            finally:
                if req.rid in engine.reqs:  # client went away before the end
                    engine.abort(req, "Aborted by AbortReq.")

        return handle


def build_app(engine: Engine, cfg: EngineConfig) -> web.Application:
    app = web.Application(client_max_size=64 * 1024 * 1024)
    api = Api(engine, cfg)
    app.router.add_get("/health", api.health)
    app.router.add_get("/health_generate", api.health)
    app.router.add_get("/v1/models", api.models)
    for path in ("/server_info", "/get_server_info"):
        app.router.add_get(path, api.server_info)
    for path in ("/model_info", "/get_model_info"):
        app.router.add_get(path, api.model_info)
    app.router.add_get("/v1/loads", api.loads)
    app.router.add_get("/metrics", api.metrics)
    app.router.add_post("/abort_request", api.abort_request)
    app.router.add_route("*", "/flush_cache", api.flush_cache)
    app.router.add_get("/pdsim/kv_corruption", api.kv_corruption)
    app.router.add_post("/pdsim/kv_corruption", api.kv_corruption)
    gen = api.serving(Endpoint.GENERATE)
    app.router.add_post("/generate", gen)
    app.router.add_put("/generate", gen)
    app.router.add_post("/v1/chat/completions", api.serving(Endpoint.CHAT))
    app.router.add_post("/v1/completions", api.serving(Endpoint.COMPLETION))
    return app


async def _body(request: web.Request) -> Any:
    try:
        return await request.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None


async def _unary(engine: Engine, req: Req) -> web.Response:
    while True:
        update = await req.updates.get()
        if update.kind == "finish":
            return _json(final_body(req))
        if update.kind == "error":
            return _json(error_body(req.endpoint, update.status, update.message), status=update.status)


async def _stream(request: web.Request, engine: Engine, req: Req) -> web.StreamResponse:
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
    await resp.prepare(request)
    try:
        await relay(resp.write, engine, req)
    except (ConnectionResetError, asyncio.CancelledError):
        engine.abort(req, "Aborted by AbortReq.")
        raise
    return resp


async def relay(write: Callable[[bytes], Awaitable[None]], engine: Engine, req: Req) -> None:
    """A stream's events, as its request's updates come: each token once, in order, then
    the finish and ``[DONE]``; or the error event. Tokens the engine appends while a write
    waits on a slow reader go out with the next update, never skipped: what was sent is
    counted by what was written, not by what the request holds once the write is done."""
    sent = 0
    silent = not engine.cfg.behaviour.stream_ends_with_an_event
    prefill = engine.cfg.mode is Mode.PREFILL
    while True:
        update = await req.updates.get()
        if update.kind == "error":
            if not engine.cfg.behaviour.error_event_is_json:
                await write(f"data: Internal Server Error: {update.message}\n\n".encode())
                await write(SSE_DONE)
            elif not silent:
                await write(stream_abort_event(req, update.status, update.message))
                await write(SSE_DONE)
            return
        final = update.kind == "finish"
        if prefill and not final:
            continue  # prefill streams once, after the transfer succeeded
        if final and silent and (req.finish or {}).get("type") == "abort":
            return  # silent_stream_end: an aborted stream just closes, without its last chunk or [DONE]
        new = req.output_ids[sent:]
        for chunk in stream_chunks(req, new, first=sent == 0 and bool(new or final), final=final):
            await write(chunk)
        sent += len(new)
        if final:
            await write(SSE_DONE)
            return
