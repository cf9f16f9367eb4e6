"""Engine configuration: command-line flags plus SGLang's environment variables.

Timeouts are read from the same variables real SGLang reads, parsed the same way
(``pdsim/environ.py``), with the same defaults and floors, so that one environment
configures pdsim and SGLang alike.
"""

from __future__ import annotations

import argparse
import enum
import os
from dataclasses import dataclass, field

from pdsim.behaviour import Behaviour
from pdsim.defects import Defect, defects_from_env
from pdsim.environ import env_float, env_int

__all__ = ["EngineConfig", "Mode", "build_parser", "config_from_args"]


class Mode(enum.Enum):
    PREFILL = "prefill"
    DECODE = "decode"


@dataclass(frozen=True)
class EngineConfig:
    """Everything one engine process needs; validated before any socket opens."""

    mode: Mode
    port: int
    host: str = "127.0.0.1"
    model: str = "pdsim/deterministic-1"
    # prefill: where its bootstrap and control servers listen (control port 0: one the system
    # picks, anew at each start, as SGLang's ZMQ port), and the control address it advertises
    # in /route (a Toxiproxy listen address when the control link is proxied; else the port bound)
    bootstrap_port: int = 8998
    control_port: int = 0
    control_advertise: str = ""
    # decode: where its kv server listens, and the address it tells prefill to send KV to
    kv_port: int = 0
    kv_advertise: str = ""
    prefill_s_per_token: float = 0.0005
    # a forward's step, in tokens across its batch (SGLang's --chunked-prefill-size): between
    # steps a room decode aborted leaves the batch, its KV freed
    prefill_chunk_tokens: int = 2048
    decode_s_per_step: float = 0.01
    kv_bytes_per_token: int = 256
    kv_chunk_bytes: int = 65536
    max_running_requests: int = 32
    kv_pool_tokens: int = 200_000
    decode_radix_cache: bool = False  # SGLang's --disaggregation-decode-enable-radix-cache
    kv_checksum: bool = False  # SGLang's --disaggregation-enable-kv-checksum (pdsim.kvcheck)
    # tokens a KV page holds (SGLang's --page-size, 1 on CPU): prefill states its own at /route,
    # and decode must hold the same layout to receive its KV
    page_size: int = 1
    max_total_num_tokens: int = 32768
    # the longest request it takes (SGLang's --context-length); None: the token pool's size
    context_length: int | None = None
    tick_s: float = 0.005
    truncate_tokens: int = 200
    mixup_period: int = 3
    bootstrap_timeout_s: float = 300.0
    waiting_timeout_s: float = 300.0
    inflight_timeout_s: float = 300.0
    heartbeat_interval_s: float = 5.0
    heartbeat_max_failure: int = 2
    # SGLang's failure hooks (pdsim.hooks): a room's poll reads Failed, decode's KV checksum
    # check fails, each at its chance
    poll_failure_prob: float = 0.0
    kv_checksum_mismatch_prob: float = 0.0
    defects: frozenset[Defect] = field(default_factory=frozenset)
    # what the engine does where a defect may bend it: SGLang's, with each defect's change
    behaviour: Behaviour = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "behaviour", Behaviour.with_defects(self.defects))
        if self.mode is Mode.PREFILL and not self.bootstrap_port:
            raise ValueError("prefill needs --bootstrap-port")
        if self.mode is Mode.DECODE and not self.kv_port:
            raise ValueError("decode needs --kv-port")
        if self.page_size < 1:
            raise ValueError("page_size must be >= 1")
        if self.context_length is not None and self.context_length < 1:
            raise ValueError("context_length must be >= 1")
        for name in ("prefill_s_per_token", "decode_s_per_step", "tick_s"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0")

    @property
    def decode_slots(self) -> int:
        """Requests decode holds past prealloc: the running limit plus SGLang 0.5.23's default
        extra slots for requests in transfer (twice the limit when it is 32 or less)."""
        extra = 2 * self.max_running_requests if self.max_running_requests <= 32 else 0
        return self.max_running_requests + extra

    @property
    def context_len(self) -> int:
        """The longest request, in tokens: what SGLang's tokenizer manager checks each against."""
        return self.context_length or self.max_total_num_tokens

    @property
    def kv_address(self) -> str:
        return self.kv_advertise or f"{self.host}:{self.kv_port}"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m pdsim", description=__doc__)
    p.add_argument("--mode", required=True, choices=[m.value for m in Mode])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--model", default="pdsim/deterministic-1")
    p.add_argument("--disaggregation-bootstrap-port", dest="bootstrap_port", type=int, default=8998)
    p.add_argument("--control-port", type=int, default=0)
    p.add_argument("--control-advertise", default="", help="host:port decode dials for control")
    p.add_argument("--kv-port", type=int, default=0)
    p.add_argument("--kv-advertise", default="", help="host:port prefill dials to send KV")
    p.add_argument("--prefill-ms-per-token", type=float, default=0.5)
    p.add_argument("--decode-ms-per-step", type=float, default=10.0)
    p.add_argument("--kv-bytes-per-token", type=int, default=256)
    p.add_argument("--max-running-requests", type=int, default=32)
    p.add_argument("--kv-pool-tokens", type=int, default=200_000)
    p.add_argument("--disaggregation-decode-enable-radix-cache", dest="decode_radix_cache", action="store_true")
    p.add_argument("--disaggregation-enable-kv-checksum", dest="kv_checksum", action="store_true")
    p.add_argument("--page-size", type=int, default=1)
    p.add_argument("--context-length", type=int, default=None)
    return p


def config_from_args(argv: list[str] | None = None) -> EngineConfig:
    a = build_parser().parse_args(argv)
    return EngineConfig(
        mode=Mode(a.mode),
        host=a.host,
        port=a.port,
        model=a.model,
        bootstrap_port=a.bootstrap_port,
        control_port=a.control_port,
        control_advertise=a.control_advertise,
        kv_port=a.kv_port,
        kv_advertise=a.kv_advertise,
        prefill_s_per_token=a.prefill_ms_per_token / 1000,
        decode_s_per_step=a.decode_ms_per_step / 1000,
        kv_bytes_per_token=a.kv_bytes_per_token,
        max_running_requests=a.max_running_requests,
        kv_pool_tokens=a.kv_pool_tokens,
        decode_radix_cache=a.decode_radix_cache,
        kv_checksum=a.kv_checksum,
        page_size=a.page_size,
        context_length=a.context_length,
        truncate_tokens=int(os.environ.get("PDSIM_TRUNCATE_TOKENS", "200")),
        # EnvInt and EnvFloat as in SGLang 0.5.23 (pdsim/environ.py), with its floors (common/conn.py)
        bootstrap_timeout_s=env_int("SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT", 300),
        waiting_timeout_s=env_int("SGLANG_DISAGGREGATION_WAITING_TIMEOUT", 300),
        # the incident's patched engine (upstream has no such variable); read like its siblings
        inflight_timeout_s=env_int("SGLANG_DISAGGREGATION_PREFILL_INFLIGHT_TIMEOUT", 300),
        heartbeat_interval_s=max(env_float("SGLANG_DISAGGREGATION_HEARTBEAT_INTERVAL", 5.0), 2.0),
        heartbeat_max_failure=max(env_int("SGLANG_DISAGGREGATION_HEARTBEAT_MAX_FAILURE", 2), 1),
        poll_failure_prob=env_float("SGLANG_TEST_DISAGG_FAILURE_PROB", 0.0),
        kv_checksum_mismatch_prob=env_float("SGLANG_TEST_DISAGG_KV_CHECKSUM_MISMATCH_PROB", 0.0),
        defects=defects_from_env(),
    )
