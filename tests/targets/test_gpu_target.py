"""The GPU targets checked without a GPU: CI's dry run of the nightly job (issue 28).

Every GPU overlay variant (TCP, RDMA) is rendered by Compose for the stacks a run starts,
side by side; the router's command line goes through smg's parser (the engines' go through
SGLang's whole startup, and run, in tests/targets/test_gpu_line.py); no two stacks share a port or a
GPU. Each check is shown to fail when the defect it guards against comes back.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from chaos.errors import ConfigError
from chaos.system.gpus import GpuPool
from chaos.system.ports import PortAllocator
from chaos.system.procs import run
from chaos.system.tools import REPO_ROOT
from chaos.targets.compose import VARIANTS, compose_env, rendered
from chaos.targets.gpu import GPU
from chaos.targets.stack import PortPlan, StackConfig

VENV = REPO_ROOT / ".tools" / "sglang" / "venv"
needs_sglang_venv = pytest.mark.skipif(
    not (VENV / "bin" / "python").exists(), reason="real SGLang not set up: run `make setup-sglang`"
)
needs_compose = pytest.mark.skipif(
    shutil.which("docker") is None, reason="no docker CLI with Compose: run scripts/docker-setup.sh"
)


def render(
    variant: str, env: dict[str, str], project: str = "pdchaos-dry-run", compose_dir: Path = REPO_ROOT / "compose"
) -> dict[str, Any]:
    """The merged Compose model of ``variant`` for a stack's variables, as `up` would run it."""
    return rendered(variant, env, project, compose_dir)


_PORT_FLAG = re.compile(r"^--?[a-z-]*port=(\d+)$")
_LISTEN = re.compile(r'"listen":\s*"127\.0\.0\.1:(\d+)"')


def binds(model: dict[str, Any]) -> set[int]:
    """The host ports a rendered stack binds: every ``--…port=N`` of a command, and every
    Toxiproxy listener (the engines' other ports are ephemeral: the kernel keeps them apart)."""
    ports = {
        int(m.group(1))
        for svc in model["services"].values()
        for arg in svc.get("command") or []
        if (m := _PORT_FLAG.match(str(arg)))
    }
    ports |= {
        int(p) for config in model.get("configs", {}).values() for p in _LISTEN.findall(config.get("content", ""))
    }
    return ports


def gpus(model: dict[str, Any]) -> list[str]:
    """Every GPU a rendered stack's services reserve, one entry per reservation."""
    return sorted(
        d
        for svc in model["services"].values()
        for dev in svc.get("deploy", {}).get("resources", {}).get("reservations", {}).get("devices", [])
        for d in dev.get("device_ids", [])
    )


def clashes(models: list[dict[str, Any]]) -> list[str]:
    """What stacks up at once would fight over: a host port or a GPU held twice."""
    found = []
    for kind, of in (("port", lambda m: sorted(binds(m))), ("GPU", gpus)):
        seen: dict[object, int] = {}
        for i, model in enumerate(models):
            for thing in of(model):
                if thing in seen:
                    found.append(f"{kind} {thing}: stack {seen[thing]} and stack {i}")
                seen[thing] = i
    return found


def side_by_side(
    variant: str, pool: GpuPool, n: int, compose_dir: Path = REPO_ROOT / "compose"
) -> list[dict[str, Any]]:
    """``n`` stacks as a session starts them (the session's, then modules' own): port bases
    from the run's allocator, GPUs from its pool."""
    ports = PortAllocator(21000, "gw0")
    models = []
    for _ in range(n):
        base = ports.next_base()
        cfg = StackConfig(port_base=base, gpus=pool.take(f"stack {base}"))
        models.append(render(variant, compose_env(cfg), f"pdchaos-{base}", compose_dir))
    return models


# ---- the GPU pool -------------------------------------------------------------------------
def test_the_pool_hands_each_stack_two_gpus_of_its_own_and_says_who_holds_them():
    pool = GpuPool(("0", "1", "2", "3"))
    assert pool.stacks_at_once == 2
    assert pool.take("session") == ("0", "1") and pool.take("overload") == ("2", "3")
    with pytest.raises(ConfigError, match=r"no 2 free GPUs for radix.*session holds 0,1; overload holds 2,3"):
        pool.take("radix")
    pool.give_back("overload")
    assert pool.take("radix") == ("2", "3")
    with pytest.raises(ConfigError, match="names a device twice"):
        GpuPool(("0", "0"))
    with pytest.raises(ConfigError, match="needs 2 GPUs"):
        GpuPool(("GPU-5d1e",))


def test_the_pool_comes_from_pdchaos_gpus(monkeypatch):
    monkeypatch.setenv("PDCHAOS_GPUS", " 4, 5,GPU-ab ,7")
    assert GpuPool.from_env().devices == ("4", "5", "GPU-ab", "7")
    monkeypatch.delenv("PDCHAOS_GPUS")
    assert GpuPool.from_env().devices == ("0", "1")  # gpu.yaml's own PREFILL_GPU and DECODE_GPU


def _collected(gpus: str) -> list[str]:
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "suites",
            "--target=compose-gpu",
            "--collect-only",
            "-q",
            "-p",
            "no:cacheprovider",
        ],
        cwd=REPO_ROOT,
        env=os.environ | {"PDCHAOS_GPUS": gpus},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    return [line.split("::")[0] for line in out.stdout.splitlines() if "::" in line]


def test_xdist_is_refused_on_a_gpu_target_and_says_why():
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "suites", "--target=compose-gpu", "-n", "2", "--collect-only", "-q"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 4 and "drop -n" in out.stderr, out.stdout[-1000:] + out.stderr[-1000:]


def test_with_two_gpus_modules_with_their_own_stack_run_before_the_sessions():
    """Two GPUs hold one stack: the modules that start their own (a small engine, decode's
    radix cache, the KV checksum on, SGLang's failure hooks) run first, so the session's stack, which lasts to the
    end, starts after them; with four, the suites keep their file order."""
    own = {
        "suites/test_overload.py",
        "suites/test_default_backpressure.py",
        "suites/test_decode_radix_cache.py",
        "suites/test_kv_corruption.py",
        "suites/test_engine_hooks.py",
        "suites/test_mismatched_engines.py",
        "suites/test_mismatched_context.py",
        "suites/test_prefill_new_ports.py",
        "suites/test_topology.py",  # skipped there: Compose runs one engine of each kind
        "suites/test_twin_overload.py",
    }
    two = _collected("0,1")
    firsts = list(dict.fromkeys(two))[: len(own)]
    assert set(firsts) == own, firsts
    four = list(dict.fromkeys(_collected("0,1,2,3")))
    assert four == sorted(four) and set(four) == set(two)


# ---- the overlays, side by side -------------------------------------------------------------
@needs_compose
@pytest.mark.parametrize("variant", GPU)
def test_stacks_up_at_once_share_no_port_and_no_gpu(variant):
    """The session's stack and a module's own, on a 4-GPU run, as the factory makes them."""
    models = side_by_side(variant, GpuPool(("0", "1", "2", "3")), 2)
    assert clashes(models) == []
    assert [sorted(gpus(m)) for m in models] == [["0", "1"], ["2", "3"]]  # prefill and decode apart too
    assert all(len(binds(m)) >= 9 for m in models)  # the check sees the ports it compares


@needs_compose
def test_the_side_by_side_check_fails_when_a_fixed_port_or_gpu_comes_back(tmp_path):
    """The defects the review found, put back into a copy of the overlays: a torch.distributed
    port fixed in gpu.yaml (SGLang binds it even at TP=1), and GPUs not from the pool."""
    compose = tmp_path / "compose"
    shutil.copytree(REPO_ROOT / "compose", compose)
    gpu_yaml = compose / "gpu.yaml"
    text = gpu_yaml.read_text()
    assert "--nccl-port=${PDCHAOS_PORT_PREFILL_DIST" in text
    gpu_yaml.write_text(re.sub(r"--nccl-port=\$\{PDCHAOS_PORT_PREFILL_DIST:-\d+\}", "--nccl-port=31300", text))
    fixed_port = side_by_side("compose-gpu", GpuPool(("0", "1", "2", "3")), 2, compose)
    assert clashes(fixed_port) == ["port 31300: stack 0 and stack 1"]

    class NoPool(GpuPool):
        def take(self, holder: str) -> tuple[str, ...]:
            return ()  # gpu.yaml's PREFILL_GPU=0 and DECODE_GPU=1 for every stack

    same_gpus = side_by_side("compose-gpu", NoPool(("0", "1")), 2)
    assert clashes(same_gpus) == ["GPU 0: stack 0 and stack 1", "GPU 1: stack 0 and stack 1"]


# ---- the router's command line, through smg's parser; the engines' are in test_gpu_line.py ----
@needs_compose
@pytest.mark.parametrize("variant", GPU)
def test_gpu_overlay_routes_through_smg_and_gives_the_engines_their_transport(variant):
    """The router's command line, as Compose renders the overlay for a stack, goes through smg
    1.13.0's ``parse_router_args``: PD mode, decode's handshake through Toxiproxy. Each
    engine runs SGLang's launcher with the variant's transfer backend in its entrypoint (the
    lines themselves go through SGLang's startup in tests/targets/test_gpu_line.py), and only RDMA
    gets the host's devices."""
    plan = PortPlan(30000)
    services = render(variant, plan.as_env())["services"]
    backend = "mooncake_tcp" if variant == "compose-gpu" else "mooncake"
    for role in ("prefill", "decode"):
        svc = services[role]
        assert svc["entrypoint"][:4] == [
            "python3",
            "-m",
            "sglang.launch_server",
            f"--disaggregation-transfer-backend={backend}",
        ], svc["entrypoint"]
        assert not any(a.startswith("--disaggregation-ib-device") for a in svc["entrypoint"] + svc["command"])
        if variant == "compose-gpu-rdma":
            assert svc["cap_add"] == ["IPC_LOCK"] and svc["devices"][0]["source"] == "/dev/infiniband", svc
        else:
            assert "devices" not in svc and "cap_add" not in svc, svc
    router = services["router"]["command"]
    smg = run(
        [
            sys.executable,
            "-c",
            "import sys, json; from smg.launch_router import parse_router_args; a = parse_router_args(sys.argv[1:]); print(json.dumps({'pd': a.pd_disaggregation, 'prefill': a.prefill_urls, 'decode': a.decode_urls, 'port': a.port}))",
            *router,
        ],
        timeout_s=60,
    )
    assert smg.returncode == 0, smg.stderr[-1500:]
    got_router = json.loads(smg.stdout.strip().splitlines()[-1])
    assert (
        got_router["pd"]
        and got_router["port"] == plan.router
        and got_router["decode"] == [f"http://127.0.0.1:{plan.decode}"]
    ), got_router
    assert got_router["prefill"] == [[f"http://127.0.0.1:{plan.prefill}", plan.bootstrap]], (
        got_router
    )  # decode's handshake crosses Toxiproxy


@needs_compose
def test_the_model_cache_is_never_mounted_empty_and_kernels_outlive_the_containers():
    """HF_CACHE is a bind that must exist (long syntax: Compose refuses a missing source
    instead of creating it empty, after which the engines fail offline with an unclear
    error), read-only; SGLang's cache directory, where 0.5.23 points triton, flashinfer and
    its own JIT builds, is the host's, so `up` (which recreates containers) keeps them; the
    engines share the host's IPC namespace, whose /dev/shm the target cleans at down."""
    for variant in GPU:
        services = render(variant, {"HF_CACHE": "/srv/hf", "PDCHAOS_JIT_CACHE": "/srv/jit"})["services"]
        for role in ("prefill", "decode"):
            volumes = {v["target"]: v for v in services[role]["volumes"]}
            hf = volumes["/root/.cache/huggingface"]
            assert hf["source"] == "/srv/hf" and hf["read_only"] and not hf.get("bind", {}).get("create_host_path"), hf
            assert volumes["/root/.cache/sglang"]["source"] == "/srv/jit", volumes
            assert services[role]["ipc"] == "host" and VARIANTS[variant].host_ipc


# ---- the nightly job ----------------------------------------------------------------------
WORKFLOW = REPO_ROOT / ".github" / "workflows" / "nightly-gpu.yml"
CPU_WORKFLOW = REPO_ROOT / ".github" / "workflows" / "nightly-cpu.yml"
ACTIONLINT = REPO_ROOT / ".tools" / "bin" / "actionlint"


@pytest.mark.skipif(not ACTIONLINT.exists(), reason="actionlint not built: run `make setup`")
@pytest.mark.parametrize("workflow", [WORKFLOW, CPU_WORKFLOW], ids=lambda p: p.stem)
def test_the_nightly_job_is_a_valid_workflow_and_actionlint_would_say_otherwise(tmp_path, workflow):
    ok = run([str(ACTIONLINT), str(workflow)], timeout_s=60, cwd=REPO_ROOT)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    broken = tmp_path / ".github" / "workflows" / workflow.name
    broken.parent.mkdir(parents=True)
    shutil.copy(REPO_ROOT / ".github" / "actionlint.yaml", broken.parent.parent)
    minutes = yaml.safe_load(workflow.read_text())["jobs"]["suites"]["timeout-minutes"]
    broken.write_text(workflow.read_text().replace(f"timeout-minutes: {minutes}", f"timeout-minutes: [{minutes}]"))
    bad = run([str(ACTIONLINT), str(broken)], timeout_s=60, cwd=tmp_path)
    assert bad.returncode == 1 and "timeout-minutes" in bad.stdout, bad.stdout + bad.stderr


def test_the_nightly_cpu_job_runs_the_suites_on_sglang_cpu_shuffled_by_a_seed_it_names():
    """Issue 38: a test's premise must not depend on what ran before it, so every night the
    suites run against real SGLang on CPU in an order drawn from a seed the job names (the
    run's number, or one given by hand), reports kept whatever happened, nothing left behind."""
    job_file = yaml.safe_load(CPU_WORKFLOW.read_text())
    triggers = job_file[True]
    assert "seed" in triggers["workflow_dispatch"]["inputs"] and len(triggers["schedule"][0]["cron"].split()) == 5
    (job,) = job_file["jobs"].values()
    steps = {step.get("name", step.get("uses", "")): step for step in job["steps"]}
    (suites,) = [step["run"] for step in steps.values() if "make suites-sglang" in step.get("run", "")]
    assert "--shuffle --seed $SHUFFLE_SEED" in suites
    assert "github.run_number" in job["env"]["SHUFFLE_SEED"] and "inputs.seed" in job["env"]["SHUFFLE_SEED"]
    upload = next(step for step in steps.values() if step.get("uses", "").startswith("actions/upload-artifact"))
    assert upload["if"] == "always()" and upload["with"]["path"] == "reports/${{ env.PDCHAOS_RUN_ID }}/", upload
    assert steps["Nothing left behind"]["run"] == "make leftovers" and steps["Nothing left behind"]["if"] == "always()"
    targets = run(["make", "-n", "suites-sglang", "PYTEST_ARGS=--shuffle --seed 3"], timeout_s=30, cwd=REPO_ROOT)
    assert "--target sglang-cpu --shuffle --seed 3" in targets.stdout, targets.stdout + targets.stderr


def test_the_nightly_job_runs_the_entry_point_on_a_gpu_runner_and_keeps_its_reports():
    """What the job must do, read from the file a CI system runs: every night and by hand,
    on a self-hosted GPU runner, `make suites-gpu` (host checks, then the suites), the run's
    report folder uploaded whatever happened, nothing left behind; every variable it sets is
    one pd-chaos reads."""
    job_file = yaml.safe_load(WORKFLOW.read_text())
    triggers = job_file[True]  # YAML 1.1 reads the key `on` as true
    assert "workflow_dispatch" in triggers and len(triggers["schedule"][0]["cron"].split()) == 5
    (job,) = job_file["jobs"].values()
    assert {"self-hosted", "gpu"} <= set(job["runs-on"]) and job["timeout-minutes"] >= 60
    steps = {step.get("name", step.get("uses", "")): step for step in job["steps"]}
    assert any("make suites-gpu" in step.get("run", "") for step in steps.values())
    upload = next(step for step in steps.values() if step.get("uses", "").startswith("actions/upload-artifact"))
    assert upload["if"] == "always()" and upload["with"]["path"] == "reports/${{ env.PDCHAOS_RUN_ID }}/", upload
    assert steps["Nothing left behind"]["run"] == "make leftovers" and steps["Nothing left behind"]["if"] == "always()"
    assert job["env"]["PDCHAOS_TARGET"] in GPU
    # the knobs an admin sets are the job's own (a shell export never reaches it), and a re-run
    # keeps the first attempt's reports: each attempt names its own folder and artifact
    from chaos.targets.gpuhost import DEFAULT_IMAGES

    assert job["env"]["SGLANG_IMAGE"] == DEFAULT_IMAGES["SGLANG_IMAGE"] and "SGLANG_MODEL" in job["env"]
    assert "github.run_attempt" in job["env"]["PDCHAOS_RUN_ID"] and "github.run_attempt" in upload["with"]["name"]
    read = "\n".join(
        p.read_text()
        for p in [*REPO_ROOT.glob("chaos/**/*.py"), *REPO_ROOT.glob("compose/*.yaml"), *REPO_ROOT.glob("scripts/*.sh")]
    )
    for var in job["env"]:
        assert var in read, f"the job sets {var}, which nothing in pd-chaos reads"
    targets = run(["make", "-n", "suites-gpu"], timeout_s=30, cwd=REPO_ROOT)
    assert targets.returncode == 0 and "scripts/gpu.sh suites" in targets.stdout, targets.stdout + targets.stderr
