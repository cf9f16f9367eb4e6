"""One request as both engines see it: parsed from any of SGLang's three endpoints."""

from __future__ import annotations

import asyncio
import enum
import math
import random
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from pdsim.kvpoll import KVPoll, RoomStatus
from pdsim.model import Message, apply_chat_template, tokenize

__all__ = ["BadRequest", "Endpoint", "Req", "Update", "parse_request"]

DEFAULT_MAX_NEW_TOKENS = 128


class BadRequest(Exception):
    """A request SGLang would reject with 400."""


class Endpoint(enum.Enum):
    GENERATE = "/generate"
    CHAT = "/v1/chat/completions"
    COMPLETION = "/v1/completions"


@dataclass(frozen=True)
class Update:
    """What a request tells its HTTP handler: more tokens, a finish, or a failure."""

    kind: str  # "tokens" | "finish" | "error"
    status: int = 200
    message: str = ""


@dataclass(eq=False)
class Req:
    endpoint: Endpoint
    rid: str
    room: int | None
    bootstrap_host: str | None
    bootstrap_port: int | None
    input_ids: list[int]
    max_new_tokens: int
    stop: tuple[str, ...]
    ignore_eos: bool
    stream: bool
    include_usage: bool
    model: str
    # None: greedy (temperature 0). Otherwise the request samples: its tokens also depend on
    # this salt, its seed if it sent one, else its bootstrap room (the same on both legs)
    sampling_salt: int | None = None
    created: float = field(default_factory=time.time)
    arrival: float = field(default_factory=time.monotonic)
    status: RoomStatus = field(init=False)
    output_ids: list[int] = field(default_factory=list)
    finish: dict[str, Any] | None = None
    digest: str | None = None
    stage_since: float = field(default_factory=time.monotonic)
    decode_prefix_len: int = 0  # prompt tokens decode holds in its radix cache: their KV is not sent
    first_token_at: float | None = None
    leaked: bool = False
    aborted: bool = False
    client_id: str | None = None  # the x-request-id header, when the client or router sent one
    updates: asyncio.Queue[Update] = field(default_factory=asyncio.Queue)

    def __post_init__(self) -> None:
        self.status = RoomStatus(self.room if self.room is not None else -1, KVPoll.Bootstrapping)

    @property
    def bootstrap_addr(self) -> str:
        return f"{self.bootstrap_host}:{self.bootstrap_port}"

    @property
    def prompt_tokens(self) -> int:
        return len(self.input_ids)

    def push(self, update: Update) -> None:
        self.updates.put_nowait(update)


def _one(value: Any, name: str) -> Any:
    """smg turns bootstrap fields into arrays for batches; pdsim serves one prompt a request."""
    if isinstance(value, list):
        if len(value) != 1:
            raise BadRequest(f"pdsim serves one prompt per request; {name} has {len(value)} entries")
        return value[0]
    return value


def _stops(raw: Any) -> tuple[str, ...]:
    if raw is None:
        return ()
    return (raw,) if isinstance(raw, str) else tuple(str(s) for s in raw)


def _verify(temperature: Any, top_p: Any, top_k: Any, max_new: Any) -> None:
    """SGLang 0.5.23's ``SamplingParams.verify`` for the fields pdsim reads, each refusal worded
    as SGLang words it (a 400). Greedy decoding (temperature 0) sets top_k to 1 first, so a
    top_k of 0 passes with it, as in SGLang."""
    if temperature is not None and (not math.isfinite(float(temperature)) or float(temperature) < 0.0):
        raise BadRequest(f"temperature must be a non-negative finite number, got {float(temperature)}.")
    if top_p is not None and not 0.0 < float(top_p) <= 1.0:
        raise BadRequest(f"top_p must be in (0, 1], got {float(top_p)}.")
    greedy = temperature is not None and float(temperature) < 1e-6
    if top_k is not None and not greedy and int(top_k) != -1 and int(top_k) < 1:
        raise BadRequest(f"top_k must be -1 (disable) or at least 1, got {int(top_k)}.")
    if max_new is not None and int(max_new) < 0:
        raise BadRequest(f"max_new_tokens must be at least 0, got {int(max_new)}.")


def _fits(prompt: int, asked: Any, context_len: int) -> None:
    """SGLang 0.5.23's context checks (``TokenizerManager._validate_one_request``), worded as it
    words them: the prompt alone, then the prompt with the tokens asked (only where asked)."""
    if prompt >= context_len:
        raise BadRequest(
            f"The input ({prompt} tokens) is longer than the model's context length ({context_len} tokens)."
        )
    if asked is not None and prompt + int(asked) > context_len:
        raise BadRequest(
            f"Requested token count exceeds the model's maximum context length of {context_len} tokens. "
            f"You requested a total of {prompt + int(asked)} tokens: {prompt} tokens from "
            f"the input messages and {int(asked)} tokens for the completion. Please reduce the number of "
            "tokens in the input messages or the completion to fit within the limit."
        )


def parse_request(
    endpoint: Endpoint,
    body: dict[str, Any],
    *,
    model: str,
    truncate_to: int | None,
    context_len: int | None = None,
    check_sampling: bool = True,
) -> Req:
    """Build a Req; unknown extra fields (smg adds several) are ignored, as SGLang does. A
    request whose prompt, or prompt and asked tokens, exceed ``context_len`` is refused as
    SGLang's tokenizer manager refuses it (``_validate_one_request``); with ``check_sampling``
    (SGLang's way) impossible sampling parameters are refused too."""
    if not isinstance(body, dict):
        raise BadRequest("request body must be a JSON object")
    sp: dict[str, Any]
    if endpoint is Endpoint.GENERATE:
        sp = body.get("sampling_params") or {}
        if body.get("input_ids") is not None:
            ids = body["input_ids"]
            if ids and isinstance(ids[0], list):  # a batch: a list of token lists
                ids = _one(ids, "input_ids")
            input_ids = [int(i) for i in ids]
        elif body.get("text") is not None:
            input_ids = tokenize(str(_one(body["text"], "text")))
        else:
            raise BadRequest("Either text or input_ids should be provided.")
        asked = sp.get("max_new_tokens")
        stop, ignore_eos = sp.get("stop"), bool(sp.get("ignore_eos", False))
        temperature, seed = sp.get("temperature"), sp.get("sampling_seed")
    elif endpoint is Endpoint.CHAT:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise BadRequest("messages must be a non-empty list")
        prompt = apply_chat_template([Message.parse(m) for m in messages], truncate_to=truncate_to)
        input_ids = tokenize(prompt)
        asked = body.get("max_completion_tokens") or body.get("max_tokens")
        stop, ignore_eos = body.get("stop"), bool(body.get("ignore_eos", False))
        temperature, seed = body.get("temperature"), body.get("seed")
    else:
        prompt_raw = _one(body.get("prompt"), "prompt")
        if prompt_raw is None:
            raise BadRequest("prompt is required")
        input_ids = tokenize(str(prompt_raw))
        asked = body.get("max_tokens")
        stop, ignore_eos = body.get("stop"), bool(body.get("ignore_eos", False))
        temperature, seed = body.get("temperature"), body.get("seed")
    if not input_ids:
        raise BadRequest("The input is empty.")
    params = sp if endpoint is Endpoint.GENERATE else body
    if check_sampling:
        _verify(temperature, params.get("top_p"), params.get("top_k"), asked)
    max_new = asked if asked is not None else DEFAULT_MAX_NEW_TOKENS
    if context_len is not None:
        _fits(len(input_ids), asked, context_len)
    room = _one(body.get("bootstrap_room"), "bootstrap_room")
    port = _one(body.get("bootstrap_port"), "bootstrap_port")
    stream_options = body.get("stream_options") or {}
    # SGLang samples at temperature 1.0 unless the request or the model's generation config
    # says otherwise; pdsim's model has no config, so only temperature 0 is greedy
    greedy = temperature is not None and float(temperature) == 0.0
    salt = (
        None
        if greedy
        else (int(seed) if seed is not None else int(room) if room is not None else random.getrandbits(63))
        & (1 << 63) - 1
    )
    return Req(
        endpoint=endpoint,
        rid=str(body.get("rid") or uuid.uuid4().hex),
        room=int(room) if room is not None else None,
        bootstrap_host=_one(body.get("bootstrap_host"), "bootstrap_host"),
        bootstrap_port=int(port) if port is not None else None,
        input_ids=input_ids,
        max_new_tokens=max(1, int(max_new)),
        stop=_stops(stop),
        ignore_eos=ignore_eos,
        stream=bool(body.get("stream", False)),
        include_usage=bool(stream_options.get("include_usage", False)),
        model=str(body.get("model") or model),
        sampling_salt=salt,
    )
