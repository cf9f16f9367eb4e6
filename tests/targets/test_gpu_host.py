"""``pdchaos gpu-check``: what a GPU host must have before the nightly job starts anything.

The checks' logic runs against recorded answers of a host (a fake ``Host``: the commands'
outputs, as nvidia-smi and docker print them); the real command runs on this machine, which
has no GPU, and must say so and start nothing.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from chaos.system.tools import REPO_ROOT
from chaos.targets.gpuhost import DEFAULT_IMAGES, MISSING, OK, WARNING, Check, check_host

SMI = "0, GPU-aaaa, NVIDIA L4, 23034, 1, 580.82.07\n1, GPU-bbbb, NVIDIA L4, 23034, 1, 580.82.07\n"
DOCKER_INFO = {"ServerVersion": "27.3.1", "Runtimes": {"runc": {}, "nvidia": {}}, "DockerRootDir": "/var/lib/docker"}


class FakeHost:
    """Recorded answers, by the command's first words; anything else is 'not found'."""

    def __init__(self, answers: dict[str, tuple[int, str]], free_gb: float = 500.0) -> None:
        self.answers, self.free = answers, free_gb
        self.asked: list[list[str]] = []

    def run(self, argv: list[str]) -> tuple[int, str]:
        self.asked.append(argv)
        for prefix, answer in self.answers.items():
            if " ".join(argv).startswith(prefix):
                return answer
        return 127, f"{argv[0]}: not found"

    def free_gb(self, path: Path) -> float | None:
        return self.free


def good_host(**changes: tuple[int, str]) -> FakeHost:
    answers = {
        "nvidia-smi --query-gpu=index": (0, SMI),
        "nvidia-smi --query-gpu=driver_version": (0, "580.82.07\n580.82.07\n"),
        "docker info": (0, json.dumps(DOCKER_INFO)),
        "docker compose version": (0, "2.29.7\n"),
        "docker image inspect": (0, '["lmsysorg/sglang@sha256:1111"]\n'),
        "docker run --rm --gpus device=0": (0, "CUDA 13.0 NVIDIA L4 mooncake ok\n"),
        "docker run --rm --entrypoint python3 lightseekorg/smg": (0, "smg 1.13.0\n"),
    }
    return FakeHost(answers | changes)


@pytest.fixture
def cache(tmp_path: Path) -> Path:
    """An HF_HOME with the default model in it, as huggingface_hub lays it out."""
    snap = tmp_path / "hf" / "hub" / "models--Qwen--Qwen2.5-0.5B-Instruct" / "snapshots" / "abc123"
    snap.mkdir(parents=True)
    (snap / "config.json").write_text("{}")
    (snap / "model.safetensors").write_bytes(b"\0" * 1024)
    return tmp_path / "hf"


def states(checks: list[Check]) -> dict[str, str]:
    return {c.name: c.state for c in checks}


def test_a_ready_host_passes_every_check_and_names_the_digests_to_pin(cache):
    checks = check_host("compose-gpu", good_host(), {"HF_CACHE": str(cache)})
    assert set(states(checks).values()) == {OK}, checks
    image = next(c for c in checks if c.name == "image SGLANG_IMAGE")
    assert "sha256:1111" in image.found and image.fix == "pin it: SGLANG_IMAGE=lmsysorg/sglang@sha256:1111"


def test_each_missing_piece_is_named_with_its_fix(cache, tmp_path):
    no_gpu = check_host(
        "compose-gpu",
        good_host(**{"nvidia-smi --query-gpu=index": (127, "nvidia-smi: not found")}),
        {"HF_CACHE": str(cache)},
    )
    assert states(no_gpu)["GPUs"] == MISSING and "NVIDIA driver" in no_gpu[0].fix
    absent = check_host("compose-gpu", good_host(), {"HF_CACHE": str(cache), "PDCHAOS_GPUS": "2,3"})
    assert absent[0].state == MISSING and "PDCHAOS_GPUS names 2,3, not on this host" in absent[0].found
    no_toolkit = check_host(
        "compose-gpu",
        good_host(**{"docker info": (0, json.dumps(DOCKER_INFO | {"Runtimes": {"runc": {}}}))}),
        {"HF_CACHE": str(cache)},
    )
    assert states(no_toolkit)["NVIDIA Container Toolkit"] == MISSING
    no_images = check_host(
        "compose-gpu", good_host(**{"docker image inspect": (1, "Error: No such image")}), {"HF_CACHE": str(cache)}
    )
    assert [c.fix for c in no_images if c.name.startswith("image")] == ["make gpu-pull (docs/gpu.md step 3)"] * 3
    no_model = check_host(
        "compose-gpu", good_host(), {"HF_CACHE": str(cache), "SGLANG_MODEL": "meta-llama/Llama-3.1-8B-Instruct"}
    )
    assert states(no_model)["model"] == MISSING and "make gpu-model" in next(
        c.fix for c in no_model if c.name == "model"
    )
    no_cache = check_host("compose-gpu", good_host(), {"HF_CACHE": str(tmp_path / "nowhere")})
    assert "does not exist" in next(c.found for c in no_cache if c.name == "model")
    full_disk = check_host("compose-gpu", FakeHost(good_host().answers, free_gb=3.0), {"HF_CACHE": str(cache)})
    assert states(full_disk)["Docker's disk"] == MISSING and states(full_disk)["cache disk"] == MISSING
    no_docker = check_host(
        "compose-gpu",
        good_host(**{"docker info": (1, "Cannot connect to the Docker daemon")}),
        {"HF_CACHE": str(cache)},
    )
    assert states(no_docker)["Docker"] == MISSING and not any(c.name.startswith("image") for c in no_docker)


def test_a_gpu_in_use_or_an_old_driver_is_a_warning_not_a_refusal(cache):
    busy = SMI.replace("23034, 1, 580", "23034, 9000, 580", 1)
    checks = check_host(
        "compose-gpu", good_host(**{"nvidia-smi --query-gpu=index": (0, busy)}), {"HF_CACHE": str(cache)}
    )
    assert states(checks)["GPUs idle"] == WARNING and "0 (9000 MiB used)" in next(
        c.found for c in checks if c.name == "GPUs idle"
    )
    old = check_host(
        "compose-gpu",
        good_host(**{"nvidia-smi --query-gpu=driver_version": (0, "575.57.08\n")}),
        {"HF_CACHE": str(cache)},
    )
    assert states(old)["driver"] == WARNING and "older than CUDA 13.0's 580.65" in next(
        c.found for c in old if c.name == "driver"
    )
    cu129 = check_host(
        "compose-gpu",
        good_host(**{"nvidia-smi --query-gpu=driver_version": (0, "575.57.08\n")}),
        {"HF_CACHE": str(cache), "SGLANG_IMAGE": "lmsysorg/sglang:v0.5.19-cu129"},
    )
    assert states(cu129)["driver"] == OK  # 575 runs 12.9


def test_rdma_is_checked_only_for_its_target(cache):
    tcp = check_host("compose-gpu", good_host(), {"HF_CACHE": str(cache)})
    rdma = check_host("compose-gpu-rdma", good_host(), {"HF_CACHE": str(cache), "SGLANG_IB_DEVICE": "mlx5_9"})
    assert (
        "RDMA" not in states(tcp) and states(rdma)["RDMA"] == MISSING
    )  # this machine has no /dev/infiniband, or no mlx5_9


def test_make_suites_gpu_on_a_host_without_a_gpu_says_so_and_starts_nothing():
    """The entry point as a runner calls it: the host check fails, so no stack, no container,
    no pytest session; the message names each missing piece."""
    out = subprocess.run(
        ["scripts/gpu.sh", "suites", "-k", "decode_restart"],
        cwd=REPO_ROOT,
        env=os.environ | {"PDCHAOS_TARGET": "compose-gpu", "HF_CACHE": "/nonexistent"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 2, out.stdout[-2000:] + out.stderr[-2000:]
    assert "missing: GPUs" in out.stderr and "nothing was started" in out.stderr
    assert "reports in" not in out.stdout  # pytest never began


def test_the_default_images_are_the_compose_files_defaults():
    import re

    text = (REPO_ROOT / "compose" / "gpu.yaml").read_text() + (REPO_ROOT / "compose" / "stack.yaml").read_text()
    found = dict(re.findall(r"\$\{(\w+_IMAGE):-([^}]+)\}", text))
    assert found == DEFAULT_IMAGES


FAKE_DOCKER = """#!/bin/sh
# a recorded docker: `image inspect` answers a digest, every call is logged
echo "$@" >> "$FAKE_LOG"
if [ "$1" = image ]; then
  for a; do ref=$a; done
  echo "${ref%%:*}@sha256:$(printf '%s' "${ref%@*}" | sha256sum | cut -c1-64)"
fi
"""


def test_gpu_pull_pins_what_it_pulled_and_later_steps_run_exactly_that(tmp_path):
    """`make gpu-pull` records each image's digest; `make gpu-model` (and the suites) then run
    ``name:tag@sha256:...``, unless the caller names another image: a stale pin is left alone."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "docker").write_text(FAKE_DOCKER)
    (bin_dir / "docker").chmod(0o755)
    env = {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "FAKE_LOG": str(tmp_path / "calls"),
        "PDCHAOS_GPU_PINS": str(tmp_path / "pins.env"),
        "HF_CACHE": str(tmp_path / "hf"),
    }
    env.pop("SGLANG_IMAGE", None)

    def gpu(step: str, **extra: str) -> str:
        done = subprocess.run(
            ["scripts/gpu.sh", step], cwd=REPO_ROOT, env=env | extra, capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0, done.stderr
        return (tmp_path / "calls").read_text()

    gpu("pull")
    pins = dict(line.split("=", 1) for line in (tmp_path / "pins.env").read_text().splitlines())
    assert set(pins) == set(DEFAULT_IMAGES)
    for var, ref in DEFAULT_IMAGES.items():
        assert pins[var].startswith(f"{ref}@sha256:") and len(pins[var]) == len(ref) + 8 + 64, pins[var]
    calls = gpu("model").splitlines()
    assert calls[-1].startswith("run ") and f" {pins['SGLANG_IMAGE']} " in calls[-1], calls[-1]
    own = gpu("model", SGLANG_IMAGE="example/sglang:mine").splitlines()
    assert " example/sglang:mine " in own[-1] and "@sha256" not in own[-1], own[-1]


def test_each_new_refusal_says_what_to_do(cache):
    """An old Compose, an engine image that cannot start CUDA or import Mooncake, a router
    image of another smg, GPUs too small for the model: each refused, each with its fix."""
    env = {"HF_CACHE": str(cache)}
    compose = check_host("compose-gpu", good_host(**{"docker compose version": (0, "2.20.2\n")}), env)
    found = next(c for c in compose if c.name == "Compose v2")
    assert found.state == MISSING and "older than 2.23.1" in found.found and "configs.content" in found.fix
    no_cuda = good_host(**{"docker run --rm --gpus device=0": (1, "AssertionError: CUDA not available\n")})
    engine = next(c for c in check_host("compose-gpu", no_cuda, env) if c.name == "engine image runs")
    assert engine.state == MISSING and "CUDA not available" in engine.found and "driver" in engine.fix
    no_mooncake = good_host(
        **{"docker run --rm --gpus device=0": (1, "ModuleNotFoundError: No module named 'mooncake'\n")}
    )
    assert "mooncake" in next(
        c.found for c in check_host("compose-gpu", no_mooncake, env) if c.name == "engine image runs"
    )
    other_smg = good_host(**{"docker run --rm --entrypoint python3 lightseekorg/smg": (0, "smg 1.12.1\n")})
    router = next(c for c in check_host("compose-gpu", other_smg, env) if c.name == "router image runs")
    assert router.state == MISSING and "smg 1.12.1, not smg 1.13.0" in router.found and "SMG_IMAGE" in router.fix
    small = check_host("compose-gpu", good_host(), env | {"SGLANG_MEM_FRACTION": "0.04"})
    memory = next(c for c in small if c.name == "GPU memory")
    assert memory.state == MISSING and "SGLANG_MEM_FRACTION" in memory.fix, memory
    assert states(check_host("compose-gpu", good_host(), env))["GPU memory"] == OK
    # no container is tried while an image is missing: its absence is the one thing to fix
    absent = good_host(**{"docker image inspect": (1, "Error: No such image")})
    assert "engine image runs" not in states(check_host("compose-gpu", absent, env))
