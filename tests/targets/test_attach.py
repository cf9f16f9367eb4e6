"""The attach target: a stack file drives a deployment pd-chaos did not start.

Here the "foreign deployment" is an embedded stack brought up with ``pdchaos up`` in its
own state folder, and the stack file's commands are shell lines (``pdchaos svc kill
decode``, ``cat .../decode.log``), as ``systemctl kill sglang-decode`` would be elsewhere.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from chaos.errors import ConfigError, TargetError
from chaos.system.procs import run
from chaos.system.tools import REPO_ROOT
from chaos.targets.attach import DESTRUCTIVE_HINT, AttachedStack
from chaos.targets.base import Capability
from chaos.targets.stackfile import load_stack_file

PDCHAOS = str(Path(sys.executable).parent / "pdchaos")
GOOD = {
    "endpoints": {
        "client": "http://127.0.0.1:30001",
        "router": "http://127.0.0.1:30001",
        "router_metrics": "http://127.0.0.1:29001/metrics",
        "prefill": "http://127.0.0.1:30000",
        "decode": "http://127.0.0.1:30002",
    }
}


def _write(tmp_path: Path, doc: object) -> Path:
    path = tmp_path / "stack.yaml"
    path.write_text(doc if isinstance(doc, str) else yaml.safe_dump(doc))
    return path


@pytest.mark.parametrize(
    "doc, message",
    [
        ({}, r"\(top level\): 'endpoints' is a required property"),
        (
            {"endpoints": {k: v for k, v in GOOD["endpoints"].items() if k != "router"}},
            r"endpoints: 'router' is a required property",
        ),
        (
            {**GOOD, "endpoints": {**GOOD["endpoints"], "decode": "127.0.0.1:30002"}},
            r"endpoints\.decode: '127\.0\.0\.1:30002' does not match",
        ),
        (
            {**GOOD, "services": {"decode": {"running": "true", "kill": 5}}},
            r"services\.decode\.kill: 5 is not of type 'string'",
        ),
        (
            {**GOOD, "services": {"decode": {"kill": "systemctl kill sglang-decode"}}},
            r"services\.decode: 'running' is a required property",
        ),
        (
            {**GOOD, "services": {"decoder": {"running": "true"}}},
            r"services: Additional properties are not allowed \('decoder' was unexpected\)",
        ),
        (
            {**GOOD, "timeouts": {"inflight_s": -1}},
            r"timeouts\.inflight_s: -1 is less than or equal to the minimum of 0",
        ),
        (
            {**GOOD, "proxies": {"kv": {"listen": "127.0.0.1:1", "upstream": "127.0.0.1:2"}}},
            r"endpoints\.toxiproxy: required when proxies are listed \(kv\)",
        ),
        (
            {**GOOD, "endpoints": {**GOOD["endpoints"], "decode_loads": "http://127.0.0.1:30002/v1/loads"}},
            r"endpoints: 'prefill_loads' is a dependency of 'decode_loads'",
        ),
        ({**GOOD, "links": {"kv": {"blackhole": "x", "active": "y"}}}, r"links\.kv: 'heal' is a required property"),
        ({**GOOD, "links": {"kv": {"heal": "x", "active": "y"}}}, r"links\.kv: .* does not have enough properties"),
        (
            {**GOOD, "links": {"bootstrap": {"blackhole": "x", "heal": "x", "active": "y"}}},
            r"links: Additional properties are not allowed \('bootstrap' was unexpected\)",
        ),
        (
            {
                **GOOD,
                "endpoints": {**GOOD["endpoints"], "toxiproxy": "http://127.0.0.1:8474"},
                "proxies": {"kv": {"listen": "127.0.0.1:1", "upstream": "127.0.0.1:2"}},
                "links": {"kv": {"blackhole": "x", "heal": "x", "active": "y"}},
            },
            r"links\.kv: the link is also a Toxiproxy proxy",
        ),
        ("endpoints: [unclosed", r"is not valid YAML"),
    ],
)
def test_malformed_stack_file_names_the_field(tmp_path, doc, message):
    path = _write(tmp_path, doc)
    with pytest.raises(ConfigError, match=message) as err:
        load_stack_file(path)
    assert str(path) in str(err.value)


def test_live_queue_counts_are_claimed_only_with_loads_endpoints(tmp_path):
    from chaos.targets.attach import AttachedStack
    from chaos.targets.base import Capability

    plain = AttachedStack.from_file(_write(tmp_path, GOOD), state_dir=tmp_path)
    assert Capability.LIVE_QUEUE_GAUGES not in plain.capabilities
    assert "prefill_loads" in plain.missing_reason(Capability.LIVE_QUEUE_GAUGES)
    loads = {
        f"{e}_loads": GOOD["endpoints"][e] + "/v1/loads?include=core,disagg&format=prometheus"
        for e in ("prefill", "decode")
    }
    live = AttachedStack.from_file(
        _write(tmp_path, {**GOOD, "endpoints": GOOD["endpoints"] | loads}), state_dir=tmp_path
    )
    assert Capability.LIVE_QUEUE_GAUGES in live.capabilities


def test_link_faults_run_the_stack_files_commands_and_check_them(tmp_path):
    """A link's commands are the operator's: here they write and remove a file that stands
    for the rules. Each step is checked by ``active``; a command that fails, or an ``active``
    that contradicts the step, is the fault not applied (or not healed), never a no-op."""
    from chaos.errors import FaultNotApplied, FaultNotHealed

    rules = tmp_path / "rules"
    links = {
        "kv": {
            "blackhole": f"echo drop > {rules}",
            "crawl": f"echo rate {{rate_kbit}} > {rules}",
            "heal": f"rm -f {rules}",
            "active": f"cat {rules}",
        }
    }
    stack = AttachedStack.from_file(_write(tmp_path, {**GOOD, "links": links}), state_dir=tmp_path)
    assert {
        Capability.KV_LINK,
        Capability.TRANSFER_WINDOW,
    } <= stack.capabilities and Capability.CONTROL_LINK not in stack.capabilities
    assert "links.control" in stack.missing_reason(Capability.CONTROL_LINK)

    crawl = stack.link_fault("kv", rate_kbit=32)
    crawl.inject()
    assert crawl.verify() == "links.kv.active: rate 32"
    crawl.heal()
    assert "exited 1" in crawl.verify_healed() and not rules.exists()
    with pytest.raises(ConfigError, match=r"no links\.kv\.reset command"):
        stack.link_fault("kv", mode="reset")

    broken = AttachedStack.from_file(
        _write(tmp_path, {**GOOD, "links": {"kv": {**links["kv"], "blackhole": "exit 3"}}}), state_dir=tmp_path
    )
    with pytest.raises(FaultNotApplied, match=r"links\.kv\.blackhole exited 3"):
        broken.link_fault("kv", mode="blackhole").inject()
    silent = AttachedStack.from_file(
        _write(tmp_path, {**GOOD, "links": {"kv": {**links["kv"], "blackhole": "true"}}}), state_dir=tmp_path
    )
    quiet = silent.link_fault("kv", mode="blackhole")
    quiet.inject()
    with pytest.raises(FaultNotApplied, match=r"links\.kv\.active exited 1 after blackhole"):
        quiet.verify()  # the command did nothing the link shows
    stuck = AttachedStack.from_file(
        _write(tmp_path, {**GOOD, "links": {"kv": {**links["kv"], "heal": "true"}}}), state_dir=tmp_path
    )
    kept = stuck.link_fault("kv", mode="blackhole")
    kept.inject()
    kept.heal()
    with pytest.raises(FaultNotHealed, match=r"links\.kv\.active exited 0 after heal"):
        kept.verify_healed()


def test_missing_stack_file_and_missing_option_are_one_line_errors(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        load_stack_file(tmp_path / "nope.yaml")
    r = run([sys.executable, "-m", "pytest", "suites", "--target", "attach", "-q", "--co"], cwd=REPO_ROOT, timeout_s=60)
    assert r.returncode == 4 and "target attach needs --stack-file" in r.stderr, r.stderr[-500:]
    bad = _write(tmp_path, {"endpoints": {}})
    r = run(
        [sys.executable, "-m", "pytest", "suites", "--target", "attach", "--stack-file", str(bad), "-q", "--co"],
        cwd=REPO_ROOT,
        timeout_s=60,
    )
    assert r.returncode == 4 and "endpoints: 'client' is a required property" in r.stderr, r.stderr[-500:]


def _foreign_stack_file(tmp_path: Path, state_dir: Path) -> Path:
    """A stack file for the embedded stack in ``state_dir``, as ``pdchaos stack-file`` writes it."""
    done = run([PDCHAOS, "--state-dir", str(state_dir), "stack-file"], timeout_s=60)
    assert done.returncode == 0, done.stderr
    path = tmp_path / "stack.yaml"
    path.write_text(done.stdout)
    return path


@pytest.fixture
def foreign(tmp_path, stack_factory):
    """An embedded stack nobody told the rig about, and the stack file that describes it."""
    state_dir = tmp_path / "deployment"
    base = stack_factory._ports.next_base()
    up = run([PDCHAOS, "--state-dir", str(state_dir), "up", "--port-base", str(base)], timeout_s=60)
    assert up.returncode == 0, up.stderr
    try:
        yield _foreign_stack_file(tmp_path, state_dir)
    finally:
        run([PDCHAOS, "--state-dir", str(state_dir), "down"], timeout_s=60)


def test_destructive_faults_need_the_opt_in(foreign):
    safe = AttachedStack.from_file(foreign)
    assert Capability.PROCESS_CONTROL not in safe.capabilities
    assert safe.missing_reason(Capability.PROCESS_CONTROL) == DESTRUCTIVE_HINT
    assert safe.is_running("decode")
    with pytest.raises(TargetError, match="refusing to kill decode"):
        safe.kill("decode")
    assert safe.is_running("decode")
    assert "state=ready" in safe.logs("decode")
    doctor = run([PDCHAOS, "doctor", "--stack-file", str(foreign), "--window", "1", "--probe", "--json"], timeout_s=60)
    assert doctor.returncode == 0 and json.loads(doctor.stdout)["diagnosis"]["location"] == "no problem found", (
        doctor.stdout + doctor.stderr
    )

    armed = AttachedStack.from_file(foreign, allow_destructive=True)
    assert {Capability.PROCESS_CONTROL, Capability.KV_LINK, Capability.PROXIED_CLIENT} <= armed.capabilities
    armed.freeze("decode")
    assert armed.is_frozen("decode")
    armed.thaw("decode")
    armed.kill("decode")
    assert not armed.is_running("decode")
    armed.start("decode")
    assert armed.is_running("decode") and not armed.is_frozen("decode")


def _suite(stack_file: Path, *args: str, tmp: Path) -> subprocess.CompletedProcess[str]:
    return run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--target", "attach", "--stack-file", str(stack_file), "--reports-dir", str(tmp / "reports"), "-q", "-rs", *args],
        cwd=REPO_ROOT, timeout_s=300,
    )  # fmt: skip


# Never beside a real SGLang stack booting on the other worker: each of the file's commands is
# a `pdchaos svc` process, which took 3 to 10 s each there (CI, 2026-12-06).
@pytest.mark.xdist_group("sglang")
def test_suites_drive_a_foreign_deployment_through_its_stack_file(foreign, tmp_path):
    """decode_restart (freeze, kill, restart and thaw through the file's commands) and
    proxy_wedge (its Toxiproxy) pass against the attached stack, as they do on the embedded
    target. The decode_restart scenario is the one whose premise holds however long a command
    takes: prefill is frozen before the requests come. The mid-transfer one needs its freeze
    to land inside a batch's forward, which a command taking seconds cannot promise (local CI
    runs of 2026-12-06: smg's 30 s request timeout aborted the rooms before the thaw, or the
    inflight watchdog fired 5.4 s after the thaw began, before its 10 s)."""
    r = _suite(
        foreign,
        "suites/test_decode_restart.py::test_decode_restarted_alone_while_prefill_holds_rooms",
        "suites/test_proxy_wedge.py",
        "--allow-destructive",
        tmp=tmp_path,
    )
    assert r.returncode == 0 and "5 passed" in r.stdout, r.stdout[-3000:]


def test_without_the_opt_in_process_suites_skip_with_the_reason(foreign, tmp_path):
    r = _suite(foreign, "suites/test_decode_restart.py", tmp=tmp_path)
    collected = len(
        [
            ln
            for ln in run(
                [sys.executable, "-m", "pytest", "suites/test_decode_restart.py", "--co", "-q"],
                cwd=REPO_ROOT,
                timeout_s=60,
            ).stdout.splitlines()
            if "::" in ln
        ]
    )
    assert r.returncode == 0 and f"{collected} skipped" in r.stdout and "--allow-destructive" in r.stdout, r.stdout[
        -2000:
    ]
