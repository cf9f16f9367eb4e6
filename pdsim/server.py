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
from pdsim.defects import Defect
from pdsim.engine import Engine
from pdsim.environ import env_bool, env_int
from pdsim.request import BadRequest, Endpoint, Req, parse_request
from pdsim.responses import SSE_DONE, error_body, final_body, stream_abort_event, stream_chunks

__all__ = ["build_app"]


_DISAGG_QUEUES = (
    "prefill_bootstrap_queue_reqs",
    "prefill_inflight_queue_reqs",
    "decode_prealloc_queue_reqs",
    "decode_transfer_queue_reqs",
    "decode_retracted_queue_reqs",
)


def _json(obj: Any, status: int = 200) -> web.Response:
    return web.json_response(obj, status=status, dumps=lambda o: json.dumps(o, separators=(",", ":")))


def build_app(engine: Engine, cfg: EngineConfig) -> web.Application:
    app = web.Application(client_max_size=64 * 1024 * 1024)
    started = time.time()
    truncate_to = cfg.truncate_tokens if cfg.has(Defect.CONTEXT_TRUNCATION) else None
    health_timeout_s = env_int("SGLANG_HEALTH_CHECK_TIMEOUT", 20)  # SGLang reads it once, at import

    async def health(request: web.Request) -> web.Response:
        """SGLang 0.5.23's /health: with SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION (the
        default) it waits a second, then once a second, for the scheduler to have done
        anything since the probe came, up to SGLANG_HEALTH_CHECK_TIMEOUT; so even a healthy
        engine answers after at least 1 s. /health_generate always does."""
        if engine.draining:  # SGLang: "Health check request received during shutdown. Returning 503."
            return web.Response(status=503, text="")
        if request.path == "/health" and not env_bool("SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION", True):
            return web.Response(text="")
        tic = time.monotonic()
        while time.monotonic() < tic + health_timeout_s:
            await asyncio.sleep(1)
            if engine.last_tick > tic:
                return web.Response(text="")
        return web.Response(status=503, text="")

    def server_info() -> dict[str, Any]:
        return {
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
            "context_length": cfg.max_total_num_tokens,
            "version": "0.5.0-pdsim",
            "internal_states": [
                {"last_gen_throughput": 0.0, "memory_usage": {"token_usage": engine.used_tokens / cfg.kv_pool_tokens}}
            ],
        }

    def model_info() -> dict[str, Any]:
        return {
            "model_path": cfg.model,
            "tokenizer_path": cfg.model,
            "is_generation": True,
            "preferred_sampling_params": None,
            "weight_version": "default",
            "has_image_understanding": False,
            "has_audio_understanding": False,
            "model_type": "pdsim",
            "architectures": ["PdsimForCausalLM"],
        }

    async def models(_: web.Request) -> web.Response:
        return _json(
            {
                "object": "list",
                "data": [
                    {
                        "id": cfg.model,
                        "object": "model",
                        "created": int(started),
                        "owned_by": "sglang",
                        "root": cfg.model,
                        "max_model_len": cfg.max_total_num_tokens,
                    }
                ],
            }
        )

    async def loads(request: web.Request) -> web.Response:
        """SGLang 0.5.23's /v1/loads: JSON by default, Prometheus text with
        ``format=prometheus`` (every number a gauge named ``sglang_<key>``, a section's
        ``sglang_<section>_<key>``); ``include`` picks sections (core, disagg; default all).
        Live, as SGLang's is: its scheduler publishes at least every 50 ms while a queue waits."""
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

    async def metrics(_: web.Request) -> web.Response:
        return web.Response(body=engine.metrics.render(), content_type="text/plain", charset="utf-8")

    async def abort_request(request: web.Request) -> web.Response:
        body = await _body(request) or {}
        engine.abort_matching(str(body.get("rid") or ""), bool(body.get("abort_all", False)))
        return web.Response(text="")

    async def flush_cache(_: web.Request) -> web.Response:
        if engine.is_idle():
            engine.flush_cache()
            return web.Response(
                text="Cache flushed.\nPlease check backend logs for more details. (When there are running or waiting requests, the operation will not be performed.)\n"
            )
        return web.Response(status=400, text="Cache not flushed. Please check backend logs for more details.")

    def handler(endpoint: Endpoint) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
        async def handle(request: web.Request) -> web.StreamResponse:
            body = await _body(request)
            try:
                req = parse_request(endpoint, body, model=cfg.model, truncate_to=truncate_to)
                req.client_id = request.headers.get("x-request-id")
                engine.submit(req)
            except (BadRequest, TypeError, ValueError) as exc:
                status = 500 if cfg.has(Defect.CLIENT_ERROR_AS_SERVER_ERROR) else 400
                return _json(error_body(endpoint, status, str(exc)), status=status)
            try:
                if req.stream:
                    return await _stream(request, engine, req)
                return await _unary(engine, req)
            finally:
                if req.rid in engine.reqs:  # client went away before the end
                    engine.abort(req, "Aborted by AbortReq.")

        return handle

    app.router.add_get("/health", health)
    app.router.add_get("/health_generate", health)
    app.router.add_get("/v1/models", models)
    for path in ("/server_info", "/get_server_info"):
        app.router.add_get(path, lambda _: _json(server_info()))  # type: ignore[arg-type,return-value]
    for path in ("/model_info", "/get_model_info"):
        app.router.add_get(path, lambda _: _json(model_info()))  # type: ignore[arg-type,return-value]
    app.router.add_get("/v1/loads", loads)
    app.router.add_get("/metrics", metrics)
    app.router.add_post("/abort_request", abort_request)
    app.router.add_route("*", "/flush_cache", flush_cache)
    gen = handler(Endpoint.GENERATE)
    app.router.add_post("/generate", gen)
    app.router.add_put("/generate", gen)
    app.router.add_post("/v1/chat/completions", handler(Endpoint.CHAT))
    app.router.add_post("/v1/completions", handler(Endpoint.COMPLETION))
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
    sent = 0
    silent = engine.cfg.has(Defect.SILENT_STREAM_END)
    prefill = engine.cfg.mode is Mode.PREFILL
    try:
        while True:
            update = await req.updates.get()
            if update.kind == "error":
                if engine.cfg.has(Defect.ERROR_EVENT_NOT_JSON):
                    await resp.write(f"data: Internal Server Error: {update.message}\n\n".encode())
                    await resp.write(SSE_DONE)
                elif not silent:
                    await resp.write(stream_abort_event(req, update.status, update.message))
                    await resp.write(SSE_DONE)
                break
            final = update.kind == "finish"
            if prefill and not final:
                continue  # prefill streams once, after the transfer succeeded
            if final and silent and (req.finish or {}).get("type") == "abort":
                break  # the defect: an aborted stream just closes, without its last chunk or [DONE]
            new = req.output_ids[sent:]
            for chunk in stream_chunks(req, new, first=sent == 0 and bool(new or final), final=final):
                await resp.write(chunk)
            sent = len(req.output_ids)
            if final:
                await resp.write(SSE_DONE)
                break
    except (ConnectionResetError, asyncio.CancelledError):
        engine.abort(req, "Aborted by AbortReq.")
        raise
    return resp
