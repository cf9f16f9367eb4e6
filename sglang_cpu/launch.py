"""Start one SGLang engine of the sglang-cpu targets: the flags and environment that make
SGLang 0.5.23 run on a CPU in PD mode, written once for the local target
(``chaos/targets/sglang_cpu.py``) and the Compose overlay (``compose/sglang-cpu.yaml``).

    python sglang_cpu/launch.py prefill --model-path M --served-model-name N --port P \\
        --nccl-port Q --max-running-requests R --bootstrap-port B
    python sglang_cpu/launch.py decode  --model-path M --served-model-name N --port P --nccl-port Q \\
        --max-running-requests R

It replaces itself (``exec``) with ``python -m sglang.launch_server`` under the same
interpreter, so the engine is the process the target signals, and it imports nothing of
SGLang's. The disaggregation timeouts and the library path come from the caller's
environment: they are the stack's, not the engine's.

Each flag and variable is from the trial in issue 12, checked against sglang 0.5.23's source.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

SHIM = Path(__file__).resolve().parent / "shim"  # sgl_kernel, and the KV checksum's CPU digest (shim/sitecustomize.py)

# What a CPU cannot have of a GPU engine's command line, and what it runs instead. This is
# the one swap between the GPU targets' engines (compose/gpu.yaml) and these: the gpu-on-cpu
# target runs gpu.yaml's own command lines with it, and tests/targets/test_gpu_line.py shows that it
# changes these fields of SGLang's arguments and no other.
CPU_SWAP: dict[str, tuple[str, ...]] = {
    "--device": ("cpu",),
    "--attention-backend": ("torch_native",),  # the GPU's flashinfer/triton kernels
    "--disable-overlap-schedule": (),  # the overlap scheduler needs CUDA streams
    "--sleep-on-idle": (),  # otherwise each idle scheduler spins a whole core
    "--max-total-tokens": ("65536",),  # the KV pool, which a GPU sizes from free memory
    "--dtype": ("bfloat16",),
}
ROLE_SWAP: dict[str, dict[str, tuple[str, ...]]] = {
    "prefill": {},
    "decode": {"--disaggregation-decode-retraction-backup": ("cpu_tensor",)},  # else torch.cuda.cudart() at startup
}
# The variables a CPU engine needs besides the GPU engine's (the model is local: offline)
CPU_ENV = {
    "SGLANG_USE_CPU_ENGINE": "1",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "OMP_NUM_THREADS": "1",
    "PYTHONUNBUFFERED": "1",
}
# otherwise prefill's first request reaches pin_memory and torch.cuda.Event (disaggregation/prefill.py)
ROLE_ENV = {"prefill": {"SGLANG_DISAGGREGATION_ALL_CP_RANKS_TRANSFER": "1"}, "decode": {}}

FLAGS = (
    "--disaggregation-transfer-backend", "mooncake_tcp", "--enable-metrics",
    "--decode-log-interval", "1",  # /metrics' decode queue gauges move when decode logs a batch: every step
    "--load-snapshot-publish-interval", "1",  # /v1/loads (the live queue counts) at every decode step too
    "--log-requests", "--log-requests-level", "0",  # Receive:/Finish: lines with rid and routing_key
    "--skip-server-warmup",
)  # fmt: skip

ROLE_FLAGS = {"prefill": ("--disaggregation-mode", "prefill"), "decode": ("--disaggregation-mode", "decode")}

ENV = {  # this target's engines: loopback, Mooncake over TCP
    "SGLANG_HOST_IP": "127.0.0.1",  # what SGLang advertises to its peer: loopback only
    "MC_FORCE_TCP": "1",
    "MC_TCP_BIND_ADDRESS": "127.0.0.1",
}


def swap_flags(role: str) -> tuple[str, ...]:
    """``CPU_SWAP`` and the role's ``ROLE_SWAP`` as command-line items."""
    return tuple(item for flag, value in (CPU_SWAP | ROLE_SWAP[role]).items() for item in (flag, *value))


def on_cpu(argv: list[str], role: str, model_path: str) -> list[str]:
    """A GPU engine's arguments (after ``-m sglang.launch_server``) with the swap: each swapped
    flag it has dropped (``--flag=value`` or ``--flag value``), the model path the local
    tiny model's, the swap appended. Nothing else changes."""
    takes_value = {flag: bool(value) for flag, value in (CPU_SWAP | ROLE_SWAP[role]).items()} | {"--model-path": True}
    out: list[str] = []
    items = iter(argv)
    for item in items:
        flag, given, _ = item.partition("=")
        if flag not in takes_value:
            out.append(item)
        elif takes_value[flag] and not given:
            next(items, None)  # its value, given as the next item
    return [*out, "--model-path", model_path, *swap_flags(role)]


def command(
    role: str,
    *,
    model_path: str,
    served_model_name: str,
    port: int,
    nccl_port: int,
    max_running_requests: int,
    bootstrap_port: int | None,
    decode_radix_cache: bool = False,
    kv_checksum: bool = False,
    page_size: int | None = None,
    context_length: int | None = None,
) -> list[str]:
    """The engine's argv after the interpreter. The running limit is the stack's (an overload
    suite runs a stack with a small one), and so are decode's radix cache and the KV checksum
    (both engines; its digest runs on a CPU by ``shim/sitecustomize.py``)."""
    argv = ["-m", "sglang.launch_server", "--model-path", model_path, "--served-model-name", served_model_name,
            "--host", "127.0.0.1", "--port", str(port), "--nccl-port", str(nccl_port),
            "--max-running-requests", str(max_running_requests), *FLAGS, *ROLE_FLAGS[role], *swap_flags(role)]  # fmt: skip
    if role == "prefill":
        if bootstrap_port is None:
            raise SystemExit("launch.py prefill needs --bootstrap-port")
        argv += ["--disaggregation-bootstrap-port", str(bootstrap_port)]
    elif decode_radix_cache:
        argv += ["--disaggregation-decode-enable-radix-cache"]
    if kv_checksum:
        argv += ["--disaggregation-enable-kv-checksum"]
    if page_size is not None:  # where a stack makes one engine's KV layout differ from the other's
        argv += ["--page-size", str(page_size)]
    if context_length is not None:  # where a stack makes one engine's longest request differ
        argv += ["--context-length", str(context_length)]
    return argv


def cpu_environment(role: str, base: dict[str, str]) -> dict[str, str]:
    """``base`` (the engine's own variables) with what a CPU engine needs besides, and the
    shim first on ``PYTHONPATH``."""
    path = os.pathsep.join(p for p in (str(SHIM), base.get("PYTHONPATH", "")) if p)
    return base | CPU_ENV | ROLE_ENV[role] | {"PYTHONPATH": path}


def environment(role: str, base: dict[str, str]) -> dict[str, str]:
    """``base`` with this target's engine variables (loopback, Mooncake over TCP) and the CPU's."""
    return cpu_environment(role, base | ENV)


def main(args: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("role", choices=sorted(ROLE_FLAGS))
    parser.add_argument("--model-path", required=True)
    parser.add_argument("--served-model-name", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--nccl-port", type=int, required=True)
    parser.add_argument("--max-running-requests", type=int, required=True)
    parser.add_argument("--bootstrap-port", type=int)
    parser.add_argument(
        "--disaggregation-decode-enable-radix-cache",
        dest="decode_radix_cache",
        action="store_true",
        help="decode: SGLang's own flag, passed on",
    )
    parser.add_argument(
        "--disaggregation-enable-kv-checksum",
        dest="kv_checksum",
        action="store_true",
        help="both engines: SGLang's own flag, passed on",
    )
    parser.add_argument("--page-size", type=int, help="SGLang's own flag, passed on (default: SGLang's)")
    parser.add_argument("--context-length", type=int, help="SGLang's own flag, passed on (default: the model's)")
    a = parser.parse_args(args)
    argv = command(a.role, model_path=a.model_path, served_model_name=a.served_model_name, port=a.port, nccl_port=a.nccl_port,
                   max_running_requests=a.max_running_requests, bootstrap_port=a.bootstrap_port, decode_radix_cache=a.decode_radix_cache,
                   kv_checksum=a.kv_checksum, page_size=a.page_size, context_length=a.context_length)  # fmt: skip
    os.execve(sys.executable, [sys.executable, *argv], environment(a.role, dict(os.environ)))


if __name__ == "__main__":
    main()
