"""Prefill's bootstrap server: ``PUT/GET /route`` and ``GET /health`` (SGLang's
``CommonKVBootstrapServer``).

Decode reads route info here once per prefill address and heartbeats ``/health``. The
``prefill_instance`` field is pdsim's stand-in for the identity that SGLang's rank ports
carry: a restarted prefill gets a new one, so decode must not reuse cached route info.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

__all__ = ["BootstrapServer"]

_RANK_KEYS = ("prefill_dp_rank", "prefill_cp_rank", "target_tp_rank", "target_pp_rank")


class BootstrapServer:
    """Rank registry for a single-rank (tp=dp=cp=pp=1) prefill."""

    def __init__(self, page_size: int = 1) -> None:
        self.table: dict[tuple[int, int, int, int], dict[str, Any]] = {}
        self.page_size = page_size
        self.http_port = 0
        self.app = web.Application()
        self.app.router.add_route("*", "/route", self._route)
        self.app.router.add_get("/health", self._health)

    async def _health(self, _: web.Request) -> web.Response:
        return web.Response(text="OK")

    async def _route(self, request: web.Request) -> web.Response:
        if request.method == "PUT":
            body = await request.json()
            key = (
                int(body.get("attn_dp_rank", 0)),
                int(body.get("attn_cp_rank", 0)),
                int(body.get("attn_tp_rank", 0)),
                int(body.get("pp_rank", 0)),
            )
            self.table[key] = {
                "rank_ip": body["rank_ip"],
                "rank_port": int(body["rank_port"]),
                "prefill_instance": body.get("prefill_instance"),
            }
            self.http_port = int(body.get("prefill_http_port", 0))
            return web.Response(text="OK")
        if request.method != "GET":
            return web.Response(status=405, text="Method not allowed")
        q = request.query
        if any(k not in q for k in _RANK_KEYS):
            return web.Response(status=400, text="Missing inputs for bootstrap server.")
        if not self.table:
            return web.Response(status=503, text="Prefill server not fully registered yet (0 workers registered).")
        dp, cp, tp, pp = (int(q[k]) for k in _RANK_KEYS)
        ranks = (dp, cp, tp, pp)
        if ranks == (-1, -1, -1, -1):
            return web.json_response(
                {
                    "attn_tp_size": 1,
                    "attn_cp_size": 1,
                    "dp_size": 1,
                    "pp_size": 1,
                    "page_size": self.page_size,
                    "kv_cache_dtype": "auto",
                    "follow_bootstrap_room": True,
                    "enable_dsa_cache_layer_split": False,
                    "prefill_http_port": self.http_port,
                    "target_tp_rank": None,
                    "target_cp_rank": None,
                    "target_pp_rank": None,
                }
            )
        info = self.table.get(ranks)
        if info is None:
            return web.Response(status=404, text=f"Bootstrap info not found for ranks {ranks}")
        return web.json_response(info)
