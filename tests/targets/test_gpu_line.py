"""The GPU engines' command lines, run through SGLang's startup and then as engines, on CPU.

A parser accepts what the engine then refuses at startup: 0.5.23's ``prepare_server_args``
took gpu.yaml's empty ``--disaggregation-ib-device=``, and ``resolve_once`` (what
``launch_server`` runs before it touches a device) refused it, so both GPU engines exited at
start. Here every engine line gpu.yaml renders (TCP, RDMA with and without a device, the
own-stack modules' variants) goes through that whole resolution with the CPU swap
(``sglang_cpu/launch.py``); the swap is shown to change its own fields and no other; the
compose-gpu lines then start as real engines (the gpu-on-cpu target) and serve a PD request
through smg. Each check is shown to fail on a planted defect: the empty IB device, an unknown
flag, a value SGLang rejects, a variable SGLang never reads, a CUDA-12 image for a CUDA-13 wheel.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from importlib.metadata import PathDistribution
from itertools import chain
from pathlib import Path
from typing import Any

import httpx
import pytest

from chaos.run.stack_factory import StackFactory
from chaos.system.procs import run
from chaos.system.tools import REPO_ROOT
from chaos.targets.gpu_on_cpu import gpu_lines
from chaos.targets.gpuhost import cuda_major_of_tag, wheel_cuda_major
from chaos.targets.registry import TargetChoice
from chaos.targets.sglang_cpu import MODEL_NAME, SGLANG_HOME
from chaos.targets.stack import PortPlan, StackConfig
from sglang_cpu.launch import CPU_SWAP, ROLE_SWAP, cpu_environment, on_cpu
from tests.ports import port_base
from tests.targets.test_gpu_target import needs_compose, needs_sglang_venv

pytestmark = [needs_compose, needs_sglang_venv]

MODEL = str(SGLANG_HOME / "model")
SITE = next((SGLANG_HOME / "venv" / "lib").glob("python3*/site-packages"), Path("/nonexistent"))


def resolve(*argvs: list[str]) -> list[dict[str, Any]]:
    """Each engine line through SGLang 0.5.23's parser and ``resolve_once`` (``sglang_cpu/resolve.py``),
    in one process: its import takes seconds."""
    env = cpu_environment("decode", {"PATH": "/usr/bin:/bin"})
    done = run(
        [str(SGLANG_HOME / "venv" / "bin" / "python"), str(REPO_ROOT / "sglang_cpu" / "resolve.py"), json.dumps(argvs)],
        timeout_s=240,
        env=env,
        cwd="/tmp",
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return list(json.loads(done.stdout.strip().splitlines()[-1]))


def field(flag: str) -> str:
    """The ServerArgs field a flag sets."""
    return flag.lstrip("-").replace("-", "_")


def lines(variant: str, **env: str) -> dict[str, tuple[list[str], dict[str, str]]]:
    """The engine lines ``variant`` renders for a stack, serving the tiny model's name."""
    return gpu_lines(StackConfig(port_base=30000, model=MODEL_NAME), variant, **env)


# ---- SGLang's whole startup resolution, short of a device ----------------------------------
def test_every_gpu_engine_line_passes_sglangs_startup_resolution_and_planted_defects_do_not():
    """What each variant's engines resolve to: Mooncake over TCP (SGLang sets MC_FORCE_TCP
    itself) or over RDMA; an RDMA device named reaches the host's HCA check, which only a
    host with InfiniBand passes; and the defects a GPU night would meet fail here."""
    tcp = lines("compose-gpu")
    rdma = lines("compose-gpu-rdma")
    rdma_dev = lines("compose-gpu-rdma", SGLANG_IB_DEVICE="mlx5_0")
    own = lines(
        "compose-gpu",
        ENGINE_MAX_RUNNING_REQUESTS="2",
        ENGINE_DECODE_RADIX_CACHE="--disaggregation-decode-enable-radix-cache",
    )
    cases: dict[str, list[str]] = {}
    for name, variant in (("tcp", tcp), ("rdma", rdma), ("rdma_dev", rdma_dev)):
        for role in ("prefill", "decode"):
            cases[f"{name} {role}"] = on_cpu(variant[role][0], role, MODEL)
    cases["own decode"] = on_cpu(own["decode"][0], "decode", MODEL)
    tcp_prefill = tcp["prefill"][0]
    planted = {
        "empty IB device": on_cpu([*rdma["prefill"][0], "--disaggregation-ib-device="], "prefill", MODEL),
        "unknown flag": on_cpu([*tcp_prefill, "--disaggregation-bootstrap-prt=1"], "prefill", MODEL),
        "value the parser rejects": on_cpu([*tcp_prefill, "--disaggregation-mode=middle"], "prefill", MODEL),
        "value startup rejects": on_cpu([*tcp_prefill, "--prefill-decode-interval=-1"], "prefill", MODEL),
    }
    got = dict(zip([*cases, *planted], resolve(*cases.values(), *planted.values()), strict=True))

    for name in ("tcp prefill", "tcp decode", "own decode"):
        r = got[name].get("resolved")
        assert r is not None, f"{name}: {got[name].get('error') or got[name].get('stderr')}"
        assert r["disaggregation_transfer_backend"] == "mooncake" and r["disaggregation_ib_device"] is None, r
        assert got[name]["environ"].get("MC_FORCE_TCP") == "1", got[name]["environ"]
    for name in ("rdma prefill", "rdma decode"):
        r = got[name].get("resolved")
        assert r is not None, f"{name}: {got[name].get('error') or got[name].get('stderr')}"
        assert r["disaggregation_transfer_backend"] == "mooncake" and r["disaggregation_ib_device"] is None, r
        assert "MC_FORCE_TCP" not in got[name]["environ"]
    for role in ("prefill", "decode"):  # past the empty check, into the host's: the device string was passed
        assert got[f"rdma_dev {role}"]["raw"]["disaggregation_ib_device"] == "mlx5_0"
        assert got[f"rdma_dev {role}"]["error"].startswith("RuntimeError: InfiniBand sysfs path not found"), got
    assert got["own decode"]["resolved"]["max_running_requests"] == 2
    assert got["own decode"]["resolved"]["disaggregation_decode_enable_radix_cache"] is True
    for role, port in (("prefill", PortPlan(30000).prefill), ("decode", PortPlan(30000).decode)):
        resolved = got[f"tcp {role}"]["resolved"]
        assert resolved["disaggregation_mode"] == role and resolved["port"] == port, resolved

    assert got["empty IB device"]["error"] == "ValueError: No valid IB devices specified", got["empty IB device"]
    assert got["unknown flag"]["exit"] == 2 and "unrecognized arguments" in got["unknown flag"]["stderr"]
    assert (
        got["value the parser rejects"]["exit"] == 2 and "invalid choice" in got["value the parser rejects"]["stderr"]
    )
    assert "must be non-negative" in got["value startup rejects"]["error"], got["value startup rejects"]


def test_the_cpu_swap_changes_its_own_fields_and_no_other():
    """The swap (``CPU_SWAP``, ``ROLE_SWAP``, the model path) is the whole difference between a
    GPU engine line and the one gpu-on-cpu runs: the parsed fields that differ are exactly
    the swapped ones. A swap entry that changed nothing, or a line that changed elsewhere,
    fails here."""
    tcp = lines("compose-gpu")
    roles = ("prefill", "decode")
    parsed = resolve(*(tcp[r][0] for r in roles), *(on_cpu(tcp[r][0], r, MODEL) for r in roles))
    for i, role in enumerate(roles):
        gpu, cpu = parsed[i]["raw"], parsed[i + 2]["raw"]
        changed = {k for k in gpu if gpu[k] != cpu[k]}
        assert changed == {field(f) for f in (CPU_SWAP | ROLE_SWAP[role])} | {"model_path"}, (role, changed)


# ---- what the engines are given -------------------------------------------------------------
def names_in(files: Iterable[Path]) -> set[str]:
    """Every whole name (a run of ASCII letters, digits and underscores) the files hold, read
    as bytes: one pass over some hundred MB of sources and shared objects, where a search
    per variable took a minute."""
    found: set[bytes] = set()
    for path in files:
        found.update(re.findall(rb"[A-Za-z0-9_]+", path.read_bytes()))
    return {name.decode() for name in found}


def unread(names: list[str], read: set[str]) -> list[str]:
    """The variables no text names as a whole name: ``HOST_IP`` is not read because
    ``SGLANG_HOST_IP`` is."""
    return [n for n in names if n not in read]


def test_every_variable_the_gpu_engines_get_is_one_sglang_mooncake_or_the_hub_reads():
    read = names_in(
        chain(
            (SITE / "sglang").rglob("*.py"), (SITE / "huggingface_hub").rglob("*.py"), (SITE / "mooncake").rglob("*.so")
        )
    )
    for variant in ("compose-gpu", "compose-gpu-rdma"):
        for role, (_, env) in lines(variant).items():
            assert not unread(sorted(env), read), f"{variant} {role} sets variables nothing reads"
    # the check can fail: a name read only inside a longer one, and pdsim's own variable
    assert unread(["SGLANG_HOST", "SGLANG_DISAGGREGATION_PREFILL_INFLIGHT_TIMEOUT", "HOST_IP"], read) == [
        "SGLANG_HOST",
        "SGLANG_DISAGGREGATION_PREFILL_INFLIGHT_TIMEOUT",
    ]


def test_the_default_engine_image_is_the_build_for_the_wheels_cuda():
    """0.5.23's wheel needs CUDA 13 (cuda-python>=13, flashinfer[cu13]); upstream's CUDA 12
    builds stopped after 0.5.19. gpu.yaml's default image must be the CUDA 13 build."""
    dist = PathDistribution(next(SITE.glob("sglang-0.5.23*.dist-info")))
    major = wheel_cuda_major(dist.requires or [])
    assert major == 13
    default = re.search(r"\$\{SGLANG_IMAGE:-([^}]+)\}", (REPO_ROOT / "compose" / "gpu.yaml").read_text())
    assert default is not None
    assert cuda_major_of_tag(default.group(1)) == major, default.group(1)
    assert default.group(1).startswith(f"lmsysorg/sglang:v{dist.version}-")
    # the check can fail: the tag this file had, for this wheel
    assert cuda_major_of_tag("lmsysorg/sglang:v0.5.23-cu129") != major
    assert wheel_cuda_major(["torch==2.9.1", "cuda-python>=12.9", "flashinfer_python==0.5.3"]) == 12


# ---- the compose-gpu lines as engines, to a served request ----------------------------------
@pytest.mark.xdist_group("sglang")  # one worker runs every real-SGLang stack: one at a time
@pytest.mark.skipif(not (SGLANG_HOME / "model" / ".ready").exists(), reason="real SGLang not set up")
def test_the_compose_gpu_engine_lines_serve_a_pd_request_through_smg(pytestconfig, tmp_path):
    factory = StackFactory(TargetChoice("gpu-on-cpu"), port_base(pytestconfig, "gpu_on_cpu"), tmp_path)
    try:
        stack = factory.start()
        client = stack.info.endpoints["client"]
        body = {"model": MODEL_NAME, "messages": [{"role": "user", "content": "hello"}], "max_tokens": 8}
        reply = httpx.post(f"{client}/v1/chat/completions", json=body | {"temperature": 0}, timeout=60)
        assert reply.status_code == 200, reply.text
        assert reply.json()["usage"]["completion_tokens"] == 8
        want = gpu_lines(StackConfig(port_base=stack.info.port_base, model=MODEL_NAME))
        for role in ("prefill", "decode"):
            info = httpx.get(f"{stack.info.endpoints[role]}/server_info", timeout=10).json()
            # the GPU line's own values, not the sglang-cpu launcher's
            assert info["mem_fraction_static"] == 0.5 and info["disaggregation_mode"] == role, info
            assert "--mem-fraction-static=0.5" in want[role][0]
            assert info["max_running_requests"] == int(
                next(a for a in want[role][0] if a.startswith("--max-running-requests=")).split("=")[1]
            )
    finally:
        factory.stop_all()
