"""pdsim's HTTP side in-process: how a stream relays its tokens, what an abort matches.
Pure logic, no sockets: the engine's config is the only part of it these read."""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace
from typing import Any

from pdsim.behaviour import Behaviour
from pdsim.config import EngineConfig, Mode
from pdsim.decode import DecodeEngine
from pdsim.model import detokenize
from pdsim.request import Endpoint, Req, Update, parse_request


def _req() -> Req:
    """A streamed chat request: its events carry deltas, each token once (``/generate``
    repeats the whole text in each event, so it would hide a token skipped on the way)."""
    body = {"messages": [{"role": "user", "content": "a story"}], "max_tokens": 8, "stream": True}
    return parse_request(Endpoint.CHAT, body, model="pdsim/deterministic-1", truncate_to=None)


def _engine() -> Any:
    return SimpleNamespace(cfg=SimpleNamespace(behaviour=Behaviour(), mode=Mode.DECODE))


def test_a_token_appended_while_a_write_waits_is_streamed_with_the_next_update():
    """A slow reader: while the first token's write waits, decode appends the second. The
    stream must still carry both, in order (pdsim once counted what was sent by what the
    request held after the write, so the second token was never streamed)."""
    from pdsim.server import relay

    async def run() -> list[bytes]:
        req = _req()
        written: list[bytes] = []

        async def slow_write(chunk: bytes) -> None:
            written.append(chunk)
            if len(req.output_ids) == 1:  # the engine moves on while this write waits
                req.output_ids.append(5)
                req.push(Update("tokens"))
                req.finish = {"type": "length", "length": 2}
                req.push(Update("finish"))
            await asyncio.sleep(0)

        req.output_ids.append(3)
        req.push(Update("tokens"))
        await asyncio.wait_for(relay(slow_write, _engine(), req), timeout=5)
        return written

    written = asyncio.run(run())
    text = b"".join(written).decode()
    assert written[-1] == b"data: [DONE]\n\n", text
    events = [json.loads(line.removeprefix("data: ")) for line in text.splitlines() if line.startswith("data: {")]
    streamed = "".join(e["choices"][0]["delta"].get("content", "") for e in events)
    assert len(detokenize([3, 5]).split()) == 2  # both ids are words: a skipped one would show
    assert streamed == detokenize([3, 5]), text


def test_an_abort_with_an_empty_rid_matches_nothing_unless_it_says_all():
    """SGLang 0.5.23's ``TokenizerManager.abort_request`` ignores an empty rid without
    ``abort_all`` ("Empty rid would startswith-match every request"); pdsim once aborted
    every request it held."""
    engine = DecodeEngine(EngineConfig(mode=Mode.DECODE, port=0, kv_port=1))
    aborted: list[str] = []
    engine.abort = lambda req, reason: aborted.append(req.rid)  # type: ignore[method-assign]
    for rid in ("abc-1", "abd-2"):
        engine.reqs[rid] = SimpleNamespace(rid=rid)  # type: ignore[assignment]
    assert engine.abort_matching("", False) == 0 and aborted == []
    assert engine.abort_matching("abc", False) == 1 and aborted == ["abc-1"]
    assert engine.abort_matching("", True) == 2 and aborted == ["abc-1", "abc-1", "abd-2"]


def test_a_matched_stop_string_is_cut_from_the_reply_streamed_or_not():
    """As SGLang's ``trim_matched_stop``: the text ends before the stop string, in the body
    and in the stream's last delta; the token count keeps the token that completed it."""
    from pdsim.responses import final_body, reply_text, stream_chunks

    req = _req()
    req.output_ids = [3, 5, 7]
    words = detokenize(req.output_ids)
    stop = detokenize([7]).strip()[:2]  # inside the third word
    req.finish = {"type": "stop", "matched": stop}
    assert reply_text(req) == words[: words.find(stop)]
    body = final_body(req)
    assert body["choices"][0]["message"]["content"] == reply_text(req)
    assert body["usage"]["completion_tokens"] == 3
    events = [
        json.loads(chunk.decode().removeprefix("data: ")) for chunk in stream_chunks(req, [7], first=False, final=True)
    ]
    assert events[0]["choices"][0]["delta"]["content"] == reply_text(req)[len(detokenize([3, 5])) :]
    assert events[-1]["choices"][0]["finish_reason"] == "stop" and events[-1]["choices"][0]["matched_stop"] == stop
