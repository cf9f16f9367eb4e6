"""Whether this host can run the GPU suites, checked before anything starts
(``pdchaos gpu-check``: the first step of ``make suites-gpu``).

A nightly run that finds out at minute 15 that the model is not in the cache, or that
Docker cannot hand a container a GPU, has spent a night on nothing. Each check here names
what it found and, when that will not do, the one step that fixes it (docs/gpu.md numbers
them). A check is ``ok``, ``missing`` (the run cannot work: the exit status is 2) or a
``warning`` (it may work; the report says why it may not). The host's answers come through
a small ``Host`` interface, so that the logic is tested with recorded answers and the real
one runs the real commands.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Protocol

from chaos.errors import ConfigError
from chaos.system.gpus import GPUS_PER_STACK, GpuPool
from chaos.targets.gpu import GPU_DEFAULT_MODEL

__all__ = ["DEFAULT_IMAGES", "Check", "Host", "LocalHost", "check_host"]

OK, MISSING, WARNING = "ok", "missing", "warning"
DEFAULT_IMAGES = {  # compose/gpu.yaml and compose/stack.yaml's defaults (tests/targets/test_gpu_host.py)
    "SGLANG_IMAGE": "lmsysorg/sglang:v0.5.23-cu130",
    "SMG_IMAGE": "lightseekorg/smg:1.13.0",
    "TOXIPROXY_IMAGE": "ghcr.io/shopify/toxiproxy:2.12.0",
}
# The oldest Linux driver of each CUDA release (NVIDIA's CUDA toolkit release notes, table 3).
# An older driver may still run the image through CUDA's minor-version compatibility, or not.
CUDA_DRIVER = {"12.6": (560, 28), "12.8": (570, 26), "12.9": (575, 51), "13.0": (580, 65)}
COMPOSE_MIN = (2, 23, 1)  # inline `configs.content` (compose/stack.yaml's Toxiproxy config)
# What an engine needs of its GPU beyond the weights inside --mem-fraction-static: a KV pool
# worth serving from (SGLang refuses to start without room for one)
KV_MIN_GB = 1.0
DOCKER_ROOT_FREE_GB = 20.0  # an SGLang image is 15-25 GB
CACHE_FREE_GB = 5.0  # SGLang's compiled kernels, reports and engine logs
BUSY_GPU_MIB = 1024  # memory another process holds on a pool GPU before the engines start


@dataclass(frozen=True)
class Check:
    name: str
    state: str  # ok, missing or warning
    found: str
    fix: str = ""


class Host(Protocol):
    """What the checks ask of the host."""

    def run(self, argv: list[str]) -> tuple[int, str]:
        """Exit status and output of a command (127 when it is not installed)."""
        ...

    def free_gb(self, path: Path) -> float | None:
        """Free space where ``path`` (or its nearest existing parent) lives."""
        ...


class LocalHost:
    """This machine."""

    def run(self, argv: list[str]) -> tuple[int, str]:
        if shutil.which(argv[0]) is None:
            return 127, f"{argv[0]}: not found"
        try:
            out = subprocess.run(argv, capture_output=True, text=True, timeout=60)
        except subprocess.TimeoutExpired:
            return 124, f"`{' '.join(argv)}` gave no answer within 60 s"
        return out.returncode, out.stdout + out.stderr

    def free_gb(self, path: Path) -> float | None:
        path = path.expanduser()
        while not path.exists() and path != path.parent:
            path = path.parent
        try:
            return shutil.disk_usage(path).free / 1e9
        except OSError:
            return None


def _gpus(host: Host, pool: GpuPool) -> list[Check]:
    rc, out = host.run(
        [
            "nvidia-smi",
            "--query-gpu=index,uuid,name,memory.total,memory.used,driver_version",
            "--format=csv,noheader,nounits",
        ]
    )
    if rc != 0:
        return [
            Check(
                "GPUs",
                MISSING,
                out.strip().splitlines()[-1] if out.strip() else f"nvidia-smi exited {rc}",
                "install the NVIDIA driver (docs/gpu.md step 1)",
            )
        ]
    rows = [[f.strip() for f in line.split(",")] for line in out.strip().splitlines() if line.count(",") >= 5]
    by_id = {r[0]: r for r in rows} | {r[1]: r for r in rows}
    absent = [d for d in pool.devices if d not in by_id]
    listed = "; ".join(f"{r[0]}: {r[2]}, {int(r[3]) // 1024} GiB" for r in rows)
    if absent:
        return [
            Check(
                "GPUs",
                MISSING,
                f"PDCHAOS_GPUS names {','.join(absent)}, not on this host ({listed or 'no GPU'})",
                f"list {GPUS_PER_STACK} of this host's GPUs in PDCHAOS_GPUS",
            )
        ]
    checks = [
        Check(
            "GPUs",
            OK,
            f"{len(pool.devices)} for the run ({','.join(pool.devices)}), {pool.stacks_at_once} stack(s) at a time; host: {listed}",
        )
    ]
    busy = [f"{d} ({by_id[d][4]} MiB used)" for d in pool.devices if int(by_id[d][4]) > BUSY_GPU_MIB]
    if busy:
        checks.append(
            Check(
                "GPUs idle",
                WARNING,
                f"already in use: {', '.join(busy)}",
                "the engines' --mem-fraction-static counts the whole GPU: free them, or lower SGLANG_MEM_FRACTION",
            )
        )
    return checks


_TAG_CUDA = re.compile(r"-cu(\d\d)(\d)\b")  # lmsysorg/sglang's -cu129, -cu130 (a digest may follow)


def cuda_major_of_tag(image: str) -> int | None:
    """The CUDA major an image's tag names (``v0.5.23-cu130`` is 13), or None."""
    m = _TAG_CUDA.search(image)
    return int(m.group(1)) if m else None


def wheel_cuda_major(requires: list[str]) -> int | None:
    """The CUDA major an SGLang wheel is built against, from its requirements: ``cuda-python``'s
    lower bound, else a ``[cuNN]`` extra (flashinfer, cutlass); None if it names neither."""
    for req in requires:
        if m := re.match(r"cuda-python\s*>=\s*(\d+)", req):
            return int(m.group(1))
    extras = {int(m.group(1)) for req in requires if (m := re.search(r"\[cu(\d\d)\]", req))}
    return extras.pop() if len(extras) == 1 else None


def _driver(host: Host, image: str) -> list[Check]:
    rc, out = host.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"])
    if rc != 0 or not out.strip():
        return []  # _gpus said why
    driver = out.strip().splitlines()[0].strip()
    m = _TAG_CUDA.search(image)
    if m is None:
        return [
            Check(
                "driver",
                WARNING,
                f"{driver}; the CUDA release of {image} is not in its tag",
                "pick an image tagged -cu126/-cu128/-cu129/-cu130",
            )
        ]
    cuda = f"{m.group(1)}.{m.group(2)}"
    needed = CUDA_DRIVER.get(cuda)
    have = tuple(int(x) for x in re.findall(r"\d+", driver)[:2])
    if needed is None:
        return [Check("driver", WARNING, f"{driver}; CUDA {cuda} ({image}) is not in the table", "")]
    if have < needed:
        return [
            Check(
                "driver",
                WARNING,
                f"{driver} is older than CUDA {cuda}'s {needed[0]}.{needed[1]} ({image})",
                "upgrade the driver, or pick an SGLANG_IMAGE built for an older CUDA; it may also start through CUDA's minor-version compatibility",
            )
        ]
    return [Check("driver", OK, f"{driver} runs CUDA {cuda} ({image})")]


def _docker(host: Host) -> tuple[list[Check], dict[str, object]]:
    rc, out = host.run(["docker", "info", "--format", "{{json .}}"])
    if rc != 0:
        return [
            Check(
                "Docker",
                MISSING,
                out.strip().splitlines()[-1] if out.strip() else f"docker info exited {rc}",
                "install Docker Engine and start it (docs/gpu.md step 1)",
            )
        ], {}
    info = json.loads(out.strip().splitlines()[-1])
    checks = [Check("Docker", OK, f"engine {info.get('ServerVersion', '?')}")]
    rc, out = host.run(["docker", "compose", "version", "--short"])
    found = re.match(r"v?(\d+)\.(\d+)\.(\d+)", out.strip())
    version = tuple(int(x) for x in found.groups()) if rc == 0 and found else None
    if version is None or version < COMPOSE_MIN:
        checks.append(
            Check(
                "Compose v2",
                MISSING,
                (f"Compose {out.strip()} is older than {'.'.join(map(str, COMPOSE_MIN))}" if version else "")
                or out.strip()[:200]
                or f"exited {rc}",
                f"install docker-compose-plugin {'.'.join(map(str, COMPOSE_MIN))} or later: compose/stack.yaml's "
                "inline `configs.content` needs it",
            )
        )
    else:
        checks.append(Check("Compose v2", OK, out.strip()))
    runtimes = set(info.get("Runtimes") or {})
    cdi = [d for d in info.get("CDISpecDirs") or [] if d]
    rc, out = host.run(["nvidia-ctk", "--version"])
    if "nvidia" in runtimes:
        checks.append(Check("NVIDIA Container Toolkit", OK, "Docker has the nvidia runtime"))
    elif rc == 0:
        checks.append(
            Check(
                "NVIDIA Container Toolkit",
                WARNING,
                f"{out.strip().splitlines()[0]}, but Docker lists no nvidia runtime ({', '.join(sorted(runtimes))})",
                "sudo nvidia-ctk runtime configure --runtime=docker && sudo systemctl restart docker",
            )
        )
    else:
        checks.append(
            Check(
                "NVIDIA Container Toolkit",
                MISSING,
                f"no nvidia-ctk, no nvidia runtime in Docker{' (CDI dirs: ' + ', '.join(cdi) + ')' if cdi else ''}",
                "install nvidia-container-toolkit, then `nvidia-ctk runtime configure --runtime=docker`",
            )
        )
    return checks, info


def _images(host: Host, env: dict[str, str]) -> list[Check]:
    checks = []
    for var, default in DEFAULT_IMAGES.items():
        ref = env.get(var) or default
        rc, out = host.run(["docker", "image", "inspect", "--format", "{{json .RepoDigests}}", ref])
        if rc != 0:
            checks.append(
                Check(f"image {var}", MISSING, f"{ref} is not on this host", "make gpu-pull (docs/gpu.md step 3)")
            )
            continue
        digests = json.loads(out.strip().splitlines()[-1] or "[]") or []
        checks.append(
            Check(
                f"image {var}",
                OK,
                f"{ref} = {', '.join(digests) or 'no registry digest (built here)'}",
                "" if "@sha256:" in ref else f"pin it: {var}={digests[0]}" if digests else "",
            )
        )
    return checks


_ENGINE_PROBE = (
    "import torch, mooncake.engine; assert torch.cuda.is_available(), 'CUDA not available'; "
    "print('CUDA', torch.version.cuda, torch.cuda.get_device_name(0), 'mooncake ok')"
)


def _engine_runs(host: Host, image: str, gpu: str) -> Check:
    """The engine image on one of the run's GPUs: CUDA starts, Mooncake imports."""
    rc, out = host.run(
        ["docker", "run", "--rm", "--gpus", f"device={gpu}", "--entrypoint", "python3", image, "-c", _ENGINE_PROBE]
    )
    last = out.strip().splitlines()[-1] if out.strip() else f"exited {rc}"
    if rc != 0 or "mooncake ok" not in out:
        return Check(
            "engine image runs",
            MISSING,
            f"{image} on GPU {gpu}: {last}",
            "check the driver against the image's CUDA (the driver check), and that SGLANG_IMAGE is an SGLang image "
            "with Mooncake (docs/gpu.md step 3)",
        )
    return Check("engine image runs", OK, last)


def _router_runs(host: Host, image: str) -> Check:
    """The router image runs the smg release the rig's own smg is (the one the suites know)."""
    want = pinned_smg()
    rc, out = host.run(
        [
            "docker",
            "run",
            "--rm",
            "--entrypoint",
            "python3",
            image,
            "-c",
            "import importlib.metadata as m; print('smg', m.version('smg'))",
        ]
    )
    got = re.search(r"smg (\S+)", out)
    if rc != 0 or got is None or got.group(1) != want:
        return Check(
            "router image runs",
            MISSING,
            f"{image}: {got.group(0) if got else (out.strip().splitlines() or [f'exited {rc}'])[-1]}, not smg {want}",
            f"set SMG_IMAGE to an image of smg {want} (the release the suites were written against)",
        )
    return Check("router image runs", OK, f"{image}: smg {want}")


def pinned_smg() -> str:
    """The smg release the rig runs (pyproject.toml pins it)."""
    from importlib.metadata import version

    return version("smg")


def _memory(host: Host, pool: GpuPool, env: dict[str, str]) -> list[Check]:
    """Each run GPU's memory against what the engine needs inside --mem-fraction-static: the
    model's weights and a minimal KV pool."""
    weights = _weights_gb(env)
    rc, out = host.run(["nvidia-smi", "--query-gpu=index,uuid,name,memory.total", "--format=csv,noheader,nounits"])
    if weights is None or rc != 0:
        return []  # the model check or the GPU check said why
    rows = [[f.strip() for f in line.split(",")] for line in out.strip().splitlines() if line.count(",") >= 3]
    total = {key: int(r[3]) / 1024 for r in rows for key in (r[0], r[1])}  # by index and by UUID, in GiB
    fraction = float(env.get("SGLANG_MEM_FRACTION") or 0.5)
    need = weights + KV_MIN_GB
    small = [
        f"{d} ({total[d]:.0f} GiB x {fraction} = {total[d] * fraction:.1f})"
        for d in pool.devices
        if d in total and total[d] * fraction < need
    ]
    if small:
        return [
            Check(
                "GPU memory",
                MISSING,
                f"{', '.join(small)} < {need:.1f} GB: the model's {weights:.1f} GB of weights and a {KV_MIN_GB:.0f} GB KV pool",
                "raise SGLANG_MEM_FRACTION, or choose a smaller SGLANG_MODEL or larger GPUs",
            )
        ]
    return [Check("GPU memory", OK, f"{need:.1f} GB needed in {fraction} of each run GPU")]


def _cached(env: dict[str, str]) -> tuple[Path, list[Path], list[Path]]:
    """Where huggingface_hub keeps ``SGLANG_MODEL`` under ``HF_CACHE``: its snapshots folder,
    the config files and the weight files in it."""
    model = env.get("SGLANG_MODEL") or GPU_DEFAULT_MODEL
    cache = Path(env.get("HF_CACHE") or "~/.cache/huggingface").expanduser()
    snapshots = cache / "hub" / f"models--{model.replace('/', '--')}" / "snapshots"
    configs = sorted(snapshots.glob("*/config.json"))
    weights = [p for c in configs for p in c.parent.glob("*.safetensors")] + [
        p for c in configs for p in c.parent.glob("*.bin")
    ]
    return snapshots, configs, weights


def _size_gb(weights: list[Path]) -> float:
    return sum(p.stat().st_size for p in weights) / 1e9


def _weights_gb(env: dict[str, str]) -> float | None:
    """The cached model's weights in GB, or None when they are not all there."""
    _, configs, weights = _cached(env)
    if not configs or not weights or not all(p.exists() for p in weights):
        return None
    return _size_gb(weights)


def _model(env: dict[str, str]) -> list[Check]:
    model = env.get("SGLANG_MODEL") or GPU_DEFAULT_MODEL
    cache = Path(env.get("HF_CACHE") or "~/.cache/huggingface").expanduser()
    fetch = "make gpu-model (docs/gpu.md step 4)"
    if not cache.is_dir():
        return [Check("model", MISSING, f"HF_CACHE {cache} does not exist (Compose will not mount it)", fetch)]
    if model.startswith("/"):
        return [
            Check(
                "model",
                MISSING,
                f"SGLANG_MODEL {model} is a path; the engines see only HF_CACHE",
                "name a Hugging Face model id, cached under HF_CACHE",
            )
        ]
    snapshots, configs, weights = _cached(env)
    if not configs or not weights:
        return [
            Check("model", MISSING, f"{model} is not in {cache} (no config.json and weights under {snapshots})", fetch)
        ]
    broken = [p.name for p in weights if not p.exists()]  # a symlink to a blob a cleanup removed
    if broken:
        return [Check("model", MISSING, f"{model}: weights {', '.join(broken[:3])} point at missing blobs", fetch)]
    return [Check("model", OK, f"{model} in {cache}: {len(weights)} weight file(s), {_size_gb(weights):.1f} GB")]


def _disk(host: Host, docker_root: str, env: dict[str, str]) -> list[Check]:
    checks = []
    places = [
        ("Docker's disk", Path(docker_root) if docker_root else None, DOCKER_ROOT_FREE_GB),
        ("cache disk", Path(env.get("PDCHAOS_JIT_CACHE") or "~/.cache/pdchaos/sglang").expanduser(), CACHE_FREE_GB),
    ]
    for name, path, need in places:
        if path is None:
            continue
        free = host.free_gb(path)
        if free is None:
            checks.append(Check(name, WARNING, f"free space at {path} unknown"))
        elif free < need:
            checks.append(
                Check(
                    name,
                    MISSING,
                    f"{free:.1f} GB free at {path}, {need:.0f} GB needed",
                    "free disk space (`docker system prune` removes unused images)",
                )
            )
        else:
            checks.append(Check(name, OK, f"{free:.0f} GB free at {path}"))
    return checks


def _rdma(env: dict[str, str]) -> list[Check]:
    if not Path("/dev/infiniband").is_dir():
        return [
            Check(
                "RDMA",
                MISSING,
                "no /dev/infiniband",
                "install the RDMA drivers (rdma-core), or run --target compose-gpu (Mooncake over TCP)",
            )
        ]
    hcas = sorted(p.name for p in Path("/sys/class/infiniband").glob("*"))
    wanted = [
        d
        for d in re.split(r"[,\s]+", env.get("SGLANG_IB_DEVICE", ""))
        if d and not d.startswith("{") and not d.endswith(".json")
    ]
    absent = [d for d in wanted if d not in hcas]
    if absent:
        return [
            Check(
                "RDMA",
                MISSING,
                f"SGLANG_IB_DEVICE names {', '.join(absent)}; this host has {', '.join(hcas) or 'none'}",
                "set SGLANG_IB_DEVICE to one of them",
            )
        ]
    return [
        Check(
            "RDMA",
            OK,
            f"HCAs: {', '.join(hcas) or 'none listed'}; Mooncake uses {env.get('SGLANG_IB_DEVICE') or 'all of them'}",
        )
    ]


def check_host(target: str, host: Host, env: dict[str, str] | None = None) -> list[Check]:
    """Every check of ``target`` (compose-gpu or compose-gpu-rdma) on ``host``."""
    env = dict(os.environ if env is None else env)
    try:
        pool = GpuPool.from_env(env)
    except ConfigError as exc:
        return [Check("PDCHAOS_GPUS", MISSING, str(exc), f"list at least {GPUS_PER_STACK} GPUs")]
    engine_image = env.get("SGLANG_IMAGE") or DEFAULT_IMAGES["SGLANG_IMAGE"]
    gpus = _gpus(host, pool)
    checks = gpus + _driver(host, engine_image)
    docker, info = _docker(host)
    checks += docker
    if docker[0].state == OK:
        images = _images(host, env)
        checks += images
        if all(c.state == OK for c in [*gpus[:1], *images, *docker]):  # worth a container only then
            checks.append(_engine_runs(host, engine_image, pool.devices[0]))
            checks.append(_router_runs(host, env.get("SMG_IMAGE") or DEFAULT_IMAGES["SMG_IMAGE"]))
    checks += _model(env)
    checks += _memory(host, pool, env)
    checks += _disk(host, str(info.get("DockerRootDir", "")), env)
    if target == "compose-gpu-rdma":
        checks += _rdma(env)
    return checks


def as_json(checks: list[Check]) -> str:
    return json.dumps([asdict(c) for c in checks], indent=2)
