"""pdsim's cost and the embedded stack's throughput on this machine.

Prints: CPU seconds per output token of the pdsim engines (prefill + decode, from
/proc/<pid>/stat), and the aggregate tokens/s of N concurrent streams through
client_router -> smg -> pdsim. Run: ``.venv/bin/python bench/pdsim_throughput.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import tempfile
import time
from pathlib import Path

import httpx

from chaos.system.ports import BASES
from chaos.targets.embedded import EmbeddedStack
from chaos.targets.stack import StackConfig

_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS  # utime + stime


async def stream_one(client: httpx.AsyncClient, i: int, tokens: int) -> int:
    body = {
        "text": f"benchmark stream {i}",
        "sampling_params": {"max_new_tokens": tokens, "ignore_eos": True},
        "stream": True,
    }
    last = None
    async with client.stream("POST", "/generate", json=body) as r:
        async for line in r.aiter_lines():
            if line.startswith("data: {"):
                last = line
    return int(json.loads(last[6:])["meta_info"]["completion_tokens"]) if last else 0


async def run(stack: EmbeddedStack, streams: int, tokens: int) -> tuple[int, float]:
    limits = httpx.Limits(max_connections=streams * 2, max_keepalive_connections=streams)
    async with httpx.AsyncClient(
        base_url=stack.info.endpoints["client"], timeout=httpx.Timeout(120, connect=5), limits=limits
    ) as client:
        t0 = time.monotonic()
        counts = await asyncio.gather(*(stream_one(client, i, tokens) for i in range(streams)))
        return sum(counts), time.monotonic() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--streams", type=int, default=32)
    ap.add_argument("--tokens", type=int, default=200, help="output tokens per stream")
    ap.add_argument("--port-base", type=int, default=BASES["bench-throughput"])
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        stack = EmbeddedStack.up(StackConfig(port_base=args.port_base, state_dir=Path(tmp)))
        try:
            pids = [stack.pid("prefill"), stack.pid("decode")]
            cpu0 = sum(cpu_seconds(p) for p in pids)
            total, wall = asyncio.run(run(stack, args.streams, args.tokens))
            cpu = sum(cpu_seconds(p) for p in pids) - cpu0
            router_cpu = cpu_seconds(stack.pid("router"))
        finally:
            stack.down()
    print(f"streams={args.streams} tokens/stream={args.tokens} decode_step=10ms")
    print(f"output tokens: {total} in {wall:.2f} s -> {total / wall:.0f} tokens/s aggregate through smg")
    print(f"pdsim CPU: {cpu:.2f} s for {total} tokens -> {cpu / total * 1e6:.0f} us per output token (prefill+decode)")
    print(f"smg CPU over the stack's life: {router_cpu:.2f} s")


if __name__ == "__main__":
    main()
