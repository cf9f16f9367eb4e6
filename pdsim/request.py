"""One request as both engines see it: parsed from any of SGLang's three endpoints."""

from __future__ import annotations

import asyncio
import enum
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


def parse_request(endpoint: Endpoint, body: dict[str, Any], *, model: str, truncate_to: int | None) -> Req:
    """Build a Req; unknown extra fields (smg adds several) are ignored, as SGLang does."""
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
        max_new = sp.get("max_new_tokens", DEFAULT_MAX_NEW_TOKENS)
        stop, ignore_eos = sp.get("stop"), bool(sp.get("ignore_eos", False))
        temperature, seed = sp.get("temperature"), sp.get("sampling_seed")
    elif endpoint is Endpoint.CHAT:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise BadRequest("messages must be a non-empty list")
        prompt = apply_chat_template([Message.parse(m) for m in messages], truncate_to=truncate_to)
        input_ids = tokenize(prompt)
        max_new = body.get("max_completion_tokens") or body.get("max_tokens") or DEFAULT_MAX_NEW_TOKENS
        stop, ignore_eos = body.get("stop"), bool(body.get("ignore_eos", False))
        temperature, seed = body.get("temperature"), body.get("seed")
    else:
        prompt_raw = _one(body.get("prompt"), "prompt")
        if prompt_raw is None:
            raise BadRequest("prompt is required")
        input_ids = tokenize(str(prompt_raw))
        max_new = body.get("max_tokens") or DEFAULT_MAX_NEW_TOKENS
        stop, ignore_eos = body.get("stop"), bool(body.get("ignore_eos", False))
        temperature, seed = body.get("temperature"), body.get("seed")
    if not input_ids:
        raise BadRequest("The input is empty.")
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
