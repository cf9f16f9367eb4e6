"""Framing for the engine-to-engine TCP channels (control and kv).

A frame is a JSON header plus an optional binary payload, each length-prefixed. SGLang
uses ZMQ multipart frames for control and RDMA for KV; pdsim keeps the same messages on
plain TCP so that a Toxiproxy can sit on every link.
"""

from __future__ import annotations

import asyncio
import json
import struct
from typing import Any

__all__ = ["read_frame", "split_addr", "write_frame"]

_HEAD = struct.Struct(">II")
_MAX_HEADER = 1 << 20


async def write_frame(writer: asyncio.StreamWriter, header: dict[str, Any], payload: bytes = b"") -> None:
    data = json.dumps(header, separators=(",", ":")).encode()
    writer.write(_HEAD.pack(len(data), len(payload)) + data + payload)
    await writer.drain()


async def read_frame(reader: asyncio.StreamReader) -> tuple[dict[str, Any], bytes]:
    """Read one frame; raises ``asyncio.IncompleteReadError`` at EOF."""
    hlen, plen = _HEAD.unpack(await reader.readexactly(_HEAD.size))
    if hlen > _MAX_HEADER:
        raise ValueError(f"frame header too large: {hlen}")
    header = json.loads(await reader.readexactly(hlen))
    payload = await reader.readexactly(plen) if plen else b""
    return header, payload


def split_addr(addr: str) -> tuple[str, int]:
    host, _, port = addr.rpartition(":")
    return host, int(port)
