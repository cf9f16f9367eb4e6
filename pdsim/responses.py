"""Response bodies in SGLang's shapes: native ``/generate`` and the OpenAI endpoints."""

from __future__ import annotations

import json
import time
from typing import Any

from pdsim.model import detokenize
from pdsim.request import Endpoint, Req

__all__ = [
    "SSE_DONE",
    "error_body",
    "final_body",
    "reply_text",
    "sse",
    "stream_abort_event",
    "stream_chunks",
]

SSE_DONE = b"data: [DONE]\n\n"


def sse(obj: Any) -> bytes:
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"


def _openai_finish(req: Req) -> tuple[str | None, Any]:
    if req.finish is None:
        return None, None
    kind = req.finish.get("type")
    if kind == "stop":
        return "stop", req.finish.get("matched")
    return ("length" if kind == "length" else kind), None


def reply_text(req: Req) -> str:
    """The reply's text as SGLang returns it: a matched stop string, and what follows it,
    cut off (``DetokenizerManager.trim_matched_stop`` in SGLang 0.5.23, ``no_stop_trim``
    unset); a matched stop token has no text here."""
    text = detokenize(req.output_ids)
    matched = (req.finish or {}).get("matched")
    if isinstance(matched, str) and (pos := text.find(matched)) >= 0:
        return text[:pos]
    return text


def _usage(req: Req) -> dict[str, int]:
    n = len(req.output_ids)
    return {"prompt_tokens": req.prompt_tokens, "completion_tokens": n, "total_tokens": req.prompt_tokens + n}


def _meta(req: Req) -> dict[str, Any]:
    return {
        "id": req.rid,
        "finish_reason": req.finish,
        "prompt_tokens": req.prompt_tokens,
        "completion_tokens": len(req.output_ids),
        "cached_tokens": 0,
        "e2e_latency": round(time.monotonic() - req.arrival, 6),
        "weight_version": "default",
    }


def final_body(req: Req) -> dict[str, Any]:
    """The non-stream success body for the request's endpoint."""
    text = reply_text(req)
    if req.endpoint is Endpoint.GENERATE:
        return {"text": text, "output_ids": list(req.output_ids), "meta_info": _meta(req)}
    reason, matched = _openai_finish(req)
    if req.endpoint is Endpoint.CHAT:
        choice: dict[str, Any] = {
            "index": 0,
            "message": {"role": "assistant", "content": text, "reasoning_content": None, "tool_calls": None},
            "logprobs": None,
            "finish_reason": reason,
            "matched_stop": matched,
        }
        obj = "chat.completion"
    else:
        choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": reason, "matched_stop": matched}
        obj = "text_completion"
    return {
        "id": req.rid,
        "object": obj,
        "created": int(req.created),
        "model": req.model,
        "choices": [choice],
        "usage": _usage(req),
        "metadata": {"weight_version": "default"},
    }


def stream_chunks(req: Req, new_ids: list[int], *, first: bool, final: bool) -> list[bytes]:
    """SSE events for newly produced tokens; ``final`` adds the finish (and usage) events.

    ``/generate`` streams the whole text so far in each event (SGLang's default, without
    ``--incremental-streaming-output``); the OpenAI endpoints stream deltas.
    """
    if req.endpoint is Endpoint.GENERATE:
        if not new_ids and not final:
            return []
        return [sse({"text": reply_text(req), "output_ids": list(req.output_ids), "meta_info": _meta(req)})]
    chat = req.endpoint is Endpoint.CHAT
    base = {
        "id": req.rid,
        "object": "chat.completion.chunk" if chat else "text_completion",
        "created": int(req.created),
        "model": req.model,
    }
    out: list[bytes] = []
    if chat and first:
        out.append(
            sse(
                {
                    **base,
                    "choices": [
                        {
                            "index": 0,
                            "delta": {"role": "assistant", "content": ""},
                            "logprobs": None,
                            "finish_reason": None,
                        }
                    ],
                }
            )
        )
    text = detokenize(new_ids)
    if new_ids and final:  # the last tokens may hold the stop string the reply is cut at
        sent = detokenize(req.output_ids[: len(req.output_ids) - len(new_ids)])
        whole = reply_text(req)
        text = whole[len(sent) :] if whole.startswith(sent) else ""
    if text:  # an end-of-sequence token alone has no text to stream
        choice = {"index": 0, "delta": {"content": text}} if chat else {"index": 0, "text": text}
        out.append(sse({**base, "choices": [{**choice, "logprobs": None, "finish_reason": None}]}))
    if final:
        reason, matched = _openai_finish(req)
        choice = {"index": 0, "delta": {}} if chat else {"index": 0, "text": ""}
        out.append(
            sse({**base, "choices": [{**choice, "logprobs": None, "finish_reason": reason, "matched_stop": matched}]})
        )
        if req.include_usage:
            out.append(sse({**base, "choices": [], "usage": _usage(req)}))
    return out


def stream_abort_event(req: Req, status: int, message: str) -> bytes:
    """The event SGLang emits when a streaming request is aborted with a status code."""
    if req.endpoint is Endpoint.GENERATE:
        req.finish = {"type": "abort", "message": message, "status_code": status, "err_type": None}
        return sse({"text": detokenize(req.output_ids), "output_ids": list(req.output_ids), "meta_info": _meta(req)})
    err_type = "INTERNAL_SERVER_ERROR" if status >= 500 else "BAD_REQUEST"
    return sse({"error": {"object": "error", "message": message, "type": err_type, "param": None, "code": status}})


def error_body(endpoint: Endpoint | None, status: int, message: str) -> dict[str, Any]:
    """Non-stream error bodies: 400s as SGLang's ValueError handler, 5xx as its HTTPException."""
    if status == 400 and endpoint is Endpoint.GENERATE:
        return {"error": {"message": message}}
    if status == 400:
        return {"object": "error", "message": message, "type": "BadRequestError", "param": None, "code": 400}
    return {"object": "error", "message": message, "type": str(status), "param": None, "code": status}
