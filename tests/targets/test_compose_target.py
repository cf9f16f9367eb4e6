"""The Compose targets against a real Docker engine (scripts/docker-setup.sh makes one).

Up, status, single-service faults and down through ``pdchaos`` and the docker SDK; the GPU
overlay validated by ``docker compose config``; a crashed session's containers reaped.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from chaos.system.procs import run
from chaos.system.tools import REPO_ROOT
from chaos.targets.bringup import warm_up
from chaos.targets.compose import VARIANTS
from chaos.targets.gpu import GPU
from chaos.targets.registry import load_target
from tests.dockerhost import engine_or_skip, project_containers
from tests.ports import port_base

PDCHAOS = str(Path(sys.executable).parent / "pdchaos")
COMPOSE = REPO_ROOT / "compose"


@pytest.fixture(scope="module")
def engine():
    client = engine_or_skip()
    yield client
    client.close()


def _compose_config(*files: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    argv = ["docker", "compose", "-f", str(COMPOSE / "stack.yaml")]
    for f in files:
        argv += ["-f", str(COMPOSE / f)]
    return run([*argv, "config", "--format", "json"], timeout_s=30, env=os.environ | (env or {}))


SGLANG_ENV = {
    "PDCHAOS_SGLANG_HOME": str(REPO_ROOT / ".tools" / "sglang"),
    "PDCHAOS_SGLANG_CPU": str(REPO_ROOT / "sglang_cpu"),
    "PDCHAOS_BRIDGE": str(REPO_ROOT / "chaos" / "system" / "bridge.py"),
}


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_overlays_validate_and_keep_to_the_host_network(engine, variant):
    """No overlay makes a network: every service is on the host's loopback, except, on
    sglang-cpu.yaml, the engines in the namespace of a container with no network at all,
    joined to the host's loopback by the bridge in it (no address but 127.0.0.1 anywhere)."""
    r = _compose_config(*VARIANTS[variant].overlays, env=SGLANG_ENV)
    assert r.returncode == 0, r.stderr
    services = json.loads(r.stdout)["services"]
    namespaced = variant == "compose-sglang-cpu"
    assert set(services) == {"toxiproxy", "prefill", "decode", "router"} | ({"netns"} if namespaced else set())
    for name, svc in services.items():
        network = (
            "service:netns" if namespaced and name in ("prefill", "decode") else "none" if name == "netns" else "host"
        )
        assert svc["network_mode"] == network and svc["init"] is True, name
        assert "healthcheck" in svc, name
    if namespaced:
        assert (
            services["netns"]["cap_add"] == ["SYS_ADMIN"] and "privileged" not in services["netns"]
        )  # setns, nothing more
        assert all(v["read_only"] for v in services["netns"]["volumes"])
    if variant in GPU:
        for engine_name in ("prefill", "decode"):
            svc = services[engine_name]
            assert svc["image"].startswith("lmsysorg/sglang:")
            assert "--enable-metrics" in svc["command"] and any(
                a.startswith("--disaggregation-mode=") for a in svc["command"]
            )
            assert svc["deploy"]["resources"]["reservations"]["devices"][0]["capabilities"] == ["gpu"]
            assert svc["environment"]["SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT"] == "3"
            # smg serves only the name the workers report; the rig sends SGLANG_MODEL (chaos/targets/registry.py)
            assert "--served-model-name=Qwen/Qwen2.5-0.5B-Instruct" in svc["command"]
    if namespaced:
        for engine_name in ("prefill", "decode"):
            svc = services[engine_name]
            # the launcher the local target runs too: one place for the engines' flags and variables
            assert (
                svc["entrypoint"] == ["/usr/bin/python3", "/opt/sglang-cpu/launch.py"]
                and svc["command"][0] == engine_name
            )
            assert all(v["read_only"] for v in svc["volumes"])  # the host's venv and model, never written
            assert (
                "/v1/models" in svc["healthcheck"]["test"][-1]
            )  # Docker's probe never generates: idle_watchdog's lone request stays alone


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_decode_radix_cache_is_the_stacks_to_switch(engine, variant):
    """Every overlay's decode takes its radix cache from ENGINE_DECODE_RADIX_CACHE (what
    chaos.targets.compose sets from StackConfig.decode_radix_cache), and only then."""
    flag = "--disaggregation-decode-enable-radix-cache"
    for value, expected in (("", False), (flag, True)):
        r = _compose_config(*VARIANTS[variant].overlays, env=SGLANG_ENV | {"ENGINE_DECODE_RADIX_CACHE": value})
        assert r.returncode == 0, r.stderr
        services = json.loads(r.stdout)["services"]
        assert (flag in services["decode"]["command"]) is expected and flag not in services["prefill"]["command"], (
            value,
            services["decode"]["command"],
        )


@pytest.mark.skipif(
    not (REPO_ROOT / ".tools" / "sglang" / "model" / ".ready").exists(),
    reason="real SGLang not set up: run `make setup-sglang`",
)
@pytest.mark.xdist_group("sglang")  # with tests/targets/test_sglang_cpu.py: one SGLang stack at a time
def test_real_sglang_in_containers_answers_and_leaves_nothing(engine, pytestconfig, tmp_path):
    """compose-sglang-cpu: the sglang-cpu engines as containers, driven by the compose
    target; a greedy request gets through smg and Toxiproxy; the kv and control links break
    by packet rules in the engines' namespace (the netns container's, entered from the host):
    each fault verified, met by the engines' own traffic and healed to no rule; nothing is
    left."""
    import httpx

    from chaos.faults.packet import PacketFault, PacketLinks
    from chaos.run.stack_factory import StackFactory
    from chaos.targets.registry import TargetChoice
    from chaos.targets.sglang_cpu import packet_links_possible

    factory = StackFactory(TargetChoice("compose-sglang-cpu"), port_base(pytestconfig, "compose_sglang"), tmp_path)
    stack = factory.start()
    project = f"pdchaos-{stack.info.port_base}"
    try:
        assert set(stack.info.proxies) == {"client_router", "bootstrap"}
        body = {
            "text": "The agent asked the router a question",
            "sampling_params": {"max_new_tokens": 8, "temperature": 0},
        }
        reply = httpx.post(f"{stack.info.endpoints['client']}/generate", json=body, timeout=30)
        assert reply.status_code == 200, reply.text
        assert len(reply.json()["output_ids"]) == 8
        assert "Receive: obj=GenerateReqInput" in stack.logs("decode")  # --log-requests, read through the target
        for link, mode in [("kv", "blackhole"), ("control", "reset")] if packet_links_possible() else []:
            assert isinstance(stack, PacketLinks)
            fault = PacketFault(stack, link, mode=mode)
            fault.inject()
            try:
                evidence = fault.verify()
                t0 = time.monotonic()
                try:
                    got: object = httpx.post(
                        f"{stack.info.endpoints['client']}/generate", json=body, timeout=4
                    ).status_code
                except httpx.TimeoutException:
                    got = "timeout"
                took = time.monotonic() - t0
            finally:
                fault.heal()
            healed = fault.verify_healed()
            assert got != 200 or took > 2.0, (
                f"{fault.describe()}: a request crossed it untouched ({got} in {took:.2f}s); {evidence}"
            )
            assert fault._met is not None and fault._met.packets > 0, (
                f"{fault.describe()} met none of the engines' traffic: {healed}"
            )
    finally:
        factory.stop_all()
    assert project_containers(engine, project) == []


def test_ports_follow_the_port_plan(engine):
    from chaos.targets.stack import PortPlan

    plan = PortPlan(30000)
    services = json.loads(_compose_config("cpu.yaml", env=plan.as_env()).stdout)["services"]
    assert f"--port={plan.router}" in services["router"]["command"]
    assert str(plan.bootstrap) in services["router"]["command"]  # decode's handshake goes through the proxy
    assert f"--kv-advertise=127.0.0.1:{plan.kv}" in services["decode"]["command"]
    # the engines' torch.distributed ports are the stack's own on every overlay, so two stacks
    # (a module's own beside the session's) never bind the same one
    for overlay, env in (("sglang-cpu.yaml", SGLANG_ENV), ("gpu.yaml", {})):
        engines = json.loads(_compose_config(overlay, env=plan.as_env() | env).stdout)["services"]
        assert f"--nccl-port={plan.prefill_dist}" in engines["prefill"]["command"], overlay
        assert f"--nccl-port={plan.decode_dist}" in engines["decode"]["command"], overlay


def test_up_status_faults_down_leave_no_container(engine, tmp_path, stack_factory):
    base = stack_factory._ports.next_base()
    state = tmp_path / "state"

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return run([PDCHAOS, "--state-dir", str(state), *args], timeout_s=120)

    r = cli("up", "--target", "compose", "--port-base", str(base), "--json")
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout)
    project = info["config"]["compose"]["project"]
    try:
        assert len(project_containers(engine, project)) == 4
        status = json.loads(cli("status").stdout)
        assert status["kind"] == "compose" and all(
            s["running"] and not s["frozen"] for s in status["services"].values()
        )
        assert cli("svc", "freeze", "decode").returncode == 0
        assert cli("svc", "frozen", "decode").returncode == 0
        assert cli("svc", "thaw", "decode").returncode == 0
        assert cli("svc", "frozen", "decode").returncode == 1
        assert cli("svc", "kill", "decode").returncode == 0
        assert cli("svc", "running", "decode").returncode == 1
        assert cli("svc", "start", "decode").returncode == 0
        assert "state=ready" in cli("svc", "logs", "decode").stdout
        # `svc start` returns when decode is ready; the router opens its circuit again only at
        # its next health check, and until then the doctor rightly calls the router failing
        warm_up(load_target(state).info, timeout_s=30)
        doctor = cli("doctor", "--window", "1", "--probe", "--reports-dir", str(tmp_path / "reports"))
        assert doctor.returncode == 0 and "diagnosis: no problem found" in doctor.stdout, doctor.stdout + doctor.stderr
        again = cli("up", "--target", "compose", "--port-base", str(base))
        assert again.returncode == 1 and "in use" in again.stderr  # never replaces a live stack
    finally:
        r = cli("down")
    assert r.returncode == 0, r.stderr
    assert project_containers(engine, project) == []
    assert not (state / "stack.json").exists()


def test_a_crashed_sessions_containers_are_reaped(engine, tmp_path, stack_factory):
    base = stack_factory._ports.next_base()
    env = os.environ | {"PDCHAOS_SESSIONS_DIR": str(tmp_path / "sessions")}
    crash = (
        "import os, pathlib\n"
        "from chaos.system.cleanup import register\n"
        "from chaos.targets.stack import StackConfig\n"
        "from chaos.targets.compose import ComposeStack\n"
        f"cfg = StackConfig(port_base={base}, state_dir=pathlib.Path({str(tmp_path / 'state')!r}))\n"
        "register(cfg.state_dir)\n"
        "ComposeStack.up(cfg)\n"
        "os.kill(os.getpid(), 9)\n"
    )
    r = run([sys.executable, "-c", crash], cwd=REPO_ROOT, env=env, timeout_s=120)
    assert r.returncode == -9, r.stderr
    project = f"pdchaos-{base}"
    assert len(project_containers(engine, project)) == 4
    r = run(
        [sys.executable, "-c", "from chaos.targets.registry import reap_orphans; print(reap_orphans())"],
        cwd=REPO_ROOT,
        env=env,
        timeout_s=120,
    )
    assert r.returncode == 0 and "state" in r.stdout, r.stderr
    assert project_containers(engine, project) == []
    assert [n.name for n in engine.networks.list() if "pdchaos" in n.name] == []


def test_pause_is_retried_only_while_the_freezer_is_busy():
    """runc gives up freezing a busy cgroup and leaves retrying to its caller: ``_pause``
    retries that error alone (a small fake container; the real one is paused above)."""
    from chaos.targets.compose import _pause

    class Container:
        def __init__(self, errors: list[str]) -> None:
            self.errors, self.calls = errors, 0

        def pause(self) -> None:
            self.calls += 1
            if self.errors:
                raise RuntimeError(self.errors.pop(0))

    busy = Container(["OCI runtime pause failed: unable to freeze: unknown"] * 2)
    _pause(busy)
    assert busy.calls == 3
    gone = Container(["No such container"])
    with pytest.raises(RuntimeError, match="No such container"):
        _pause(gone)
    assert gone.calls == 1


def test_a_stack_that_fails_to_start_leaves_every_containers_log_in_the_report(engine, tmp_path, pytestconfig):
    """An engine that exits at start (pdsim refuses an unknown defect, as SGLang refused an
    empty IB device): before the containers are removed, each one's whole log and state
    goes into the run's report, and summary.md names the service that failed with its last
    lines. Nothing is left running."""
    from chaos.errors import TargetError
    from chaos.reports.summary import write_run_summary
    from chaos.run.stack_factory import StackFactory
    from chaos.targets.registry import TargetChoice

    run_dir = tmp_path / "run"
    factory = StackFactory(
        TargetChoice("compose"),
        port_base(pytestconfig, "compose_start_failure"),
        tmp_path / "state",
        record_dir=run_dir / "stacks",
    )
    with pytest.raises(TargetError):
        factory.start(defects="no_such_defect", startup_timeout_s=60)
    (kept,) = (run_dir / "stacks").glob("start-failed-compose-*")
    failure = json.loads((kept / "failure.json").read_text())
    for engine_name in ("prefill", "decode"):
        svc = failure["services"][engine_name]
        assert svc["status"] == "exited" and svc["exit_code"] != 0 and svc["oom_killed"] is False, svc
        assert "unknown pdsim defect(s): no_such_defect" in (kept / f"{engine_name}.log").read_text()
    assert failure["services"]["toxiproxy"]["status"] == "running"  # as it was when the start failed
    write_run_summary(run_dir, [], seed=1, command="test")
    summary = (run_dir / "summary.md").read_text()
    assert "## Stacks that failed to start" in summary and "failed: " in summary
    failed_line = next(line for line in summary.splitlines() if line.startswith("failed: "))
    assert "prefill" in failed_line and "decode" in failed_line and "toxiproxy" not in failed_line, failed_line
    assert "unknown pdsim defect(s): no_such_defect" in summary
    assert project_containers(engine, f"pdchaos-{failure['port_base']}") == []
