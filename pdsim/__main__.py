"""``python -m pdsim --mode prefill|decode --port N ...``: run one engine until SIGTERM,
then drain as SGLang does (/health 503, the requests taken finish) and stop."""

from __future__ import annotations

import asyncio
import os
import signal
import sys

from aiohttp import web

from pdsim.config import EngineConfig, Mode, config_from_args
from pdsim.decode import DecodeEngine
from pdsim.engine import Engine
from pdsim.prefill import PrefillEngine
from pdsim.reqlog import configure, log_event
from pdsim.server import build_app

DRAIN_TIMEOUT_S = 60.0  # the longest a SIGTERMed engine waits for its requests (SGLang: no bound)


async def _serve(cfg: EngineConfig) -> None:
    engine: Engine = PrefillEngine(cfg) if cfg.mode is Mode.PREFILL else DecodeEngine(cfg)
    runners: list[web.AppRunner] = []

    async def listen(app: web.Application, port: int) -> None:
        runner = web.AppRunner(app, handler_cancellation=True, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, cfg.host, port, reuse_address=True).start()
        runners.append(runner)

    await engine.start()
    if isinstance(engine, PrefillEngine):
        await listen(engine.bootstrap.app, cfg.bootstrap_port)
    await listen(build_app(engine, cfg), cfg.port)
    log_event(
        "engine",
        state="ready",
        mode=cfg.mode.value,
        port=cfg.port,
        defects=",".join(sorted(d.value for d in cfg.defects)) or "none",
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    if not cfg.behaviour.sigterm_drains:
        log_event("engine", state="exiting", mode=cfg.mode.value, open_requests=len(engine.reqs))
        os._exit(0)  # the defect: gone at once, every open stream cut without a final event
    log_event("engine", state="draining", mode=cfg.mode.value, open_requests=len(engine.reqs))
    drained = await engine.drain(timeout_s=DRAIN_TIMEOUT_S)
    log_event("engine", state="stopping", mode=cfg.mode.value, drained=drained)
    for runner in runners:
        await runner.cleanup()
    await engine.stop()


def main(argv: list[str] | None = None) -> int:
    try:
        cfg = config_from_args(argv)
    except ValueError as exc:
        print(f"pdsim: {exc}", file=sys.stderr)
        return 2
    configure(cfg.mode.value)
    asyncio.run(_serve(cfg))
    return 0


if __name__ == "__main__":
    sys.exit(main())
