"""The pytest plugin: options, markers and the stack fixtures.

Loaded by the root ``conftest.py``. Options live in one ``pdchaos`` group: ``--target``
(embedded, compose, compose-gpu, attach with ``--stack-file`` and ``--allow-destructive``),
``--seed``, ``--port-base`` and ``--reports-dir``. Every stack a session starts is stopped
at session end, whatever happened; an attached deployment is left as it was found.
"""

from __future__ import annotations

import os
import random
import re
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Iterator

import pytest

from chaos.bounds import Bounds
from chaos.cleanup import reap_orphans, register, shielded, terminate_as_interrupt, unregister
from chaos.errors import ConfigError, RigError, TargetError
from chaos.faults import Faults
from chaos.history import History
from chaos.ports import PortAllocator
from chaos.reports.logs import LogCursor, capture_logs
from chaos.reports.summary import result_of, write_run_summary, write_test_report
from chaos.sampler import Sampler, metrics_urls
from chaos.stack import StackConfig, Timeouts
from chaos.toxiproxy import ToxiproxyClient
from chaos.targets.base import Capability, Target
from chaos.targets.bringup import served_model
from chaos.targets.registry import TARGETS, TargetChoice
from chaos.verdicts import VerdictFailed
from chaos.workloads import Workload

__all__ = ["StackFactory"]

MARKERS = (
    "fault(family): the fault family a scenario exercises (process, network, client)",
    "needs(*capabilities): capabilities the target must have (proxied_client, proxied_kv, "
    "proxied_control, proxied_bootstrap, process_control, defects, inflight_watchdog, live_queue_gauges, transfer_window); the test skips with a reason otherwise",
)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("pdchaos", "pd-chaos")
    group.addoption("--target", default=os.environ.get("PDCHAOS_TARGET", "embedded"), help=f"target to test: {', '.join(TARGETS)} (env PDCHAOS_TARGET)")
    group.addoption("--stack-file", type=Path, default=os.environ.get("PDCHAOS_STACK_FILE"), help="with --target attach: the YAML file describing the deployment (env PDCHAOS_STACK_FILE)")
    group.addoption("--allow-destructive", action="store_true", help="with --target attach: let faults kill, freeze and restart services of a stack pd-chaos did not start")
    group.addoption("--seed", type=int, default=None, help="seed for every random choice of the rig (default: random, printed in the header)")
    group.addoption("--port-base", type=int, default=int(os.environ.get("PDCHAOS_PORT_BASE", "22000")), help="first port of the range embedded stacks use (default 22000)")
    group.addoption("--stop-at-verdict", action="store_true", help="end the session at the first failed verdict (not at a rig error): the kill matrix's -x")
    group.addoption("--reports-dir", default=os.environ.get("PDCHAOS_REPORTS", "reports"), help="where run reports and histories go (default reports/)")


_SEED = pytest.StashKey[int]()
_TARGET = pytest.StashKey[TargetChoice]()


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    for line in MARKERS:
        config.addinivalue_line("markers", line)
    try:
        choice = TargetChoice(config.getoption("--target"), config.getoption("--stack-file"), config.getoption("--allow-destructive"))
        choice.capabilities()  # an attach target's stack file is read (and checked) here
    except ConfigError as exc:
        raise pytest.UsageError(str(exc)) from None
    config.stash[_TARGET] = choice
    seed = config.getoption("--seed")
    config.stash[_SEED] = seed if seed is not None else random.SystemRandom().randrange(1 << 31)
    config.stash[_RESULTS] = []
    terminate_as_interrupt()
    reap_orphans()
    if not os.environ.get("PYTEST_XDIST_WORKER") and getattr(config.option, "xmlpath", None) is None:
        config.option.xmlpath = str(_run_dir(config) / "junit.xml")


def pytest_report_header(config: pytest.Config) -> str:
    return f"pd-chaos: target={config.getoption('--target')} seed={config.stash[_SEED]} port-base={config.getoption('--port-base')}"


class StackFactory:
    """Starts stacks of the chosen target on free ports with chosen overrides; stops all of
    them at the end. On an attached deployment it hands out that deployment, as it is."""

    def __init__(self, choice: TargetChoice, port_base: int, state_root: Path) -> None:
        self.choice = choice
        self._ports = PortAllocator(port_base)
        self._root = state_root
        self._stacks: list[Target] = []

    def start(self, *, defects: str = "", timeouts: Timeouts | None = None, **overrides: Any) -> Target:
        if not self.choice.starts_stacks:
            if defects or timeouts is not None or overrides:
                pytest.skip(f"target {self.choice.name} cannot start a stack with defects, timeouts or other overrides")
            return self.choice.start(StackConfig())
        base = self._ports.next_base()
        cfg = StackConfig(port_base=base, state_dir=self._root / f"stack-{base}", defects=defects)
        if timeouts is not None:
            cfg = replace(cfg, timeouts=timeouts)
        register(cfg.state_dir)
        try:
            stack = self.choice.start(replace(cfg, **overrides))
        except BaseException:  # a failed or interrupted start stops what it began: forget it
            with shielded():
                unregister(cfg.state_dir)
            raise
        self._stacks.append(stack)
        return stack

    def stop(self, stack: Target) -> None:
        if stack in self._stacks:
            self._stacks.remove(stack)
            with shielded():
                stack.down()
                unregister(Path(stack.info.state_dir))

    def stop_all(self) -> None:
        errors = []
        with shielded():  # a second Ctrl-C must not cut the teardown short
            while self._stacks:
                stack = self._stacks.pop()
                try:
                    stack.down()
                    unregister(Path(stack.info.state_dir))
                except Exception as exc:  # keep stopping the others
                    errors.append(exc)
        if errors:
            raise errors[0]


@pytest.fixture(scope="session")
def seed(pytestconfig: pytest.Config) -> int:
    return pytestconfig.stash[_SEED]


@pytest.fixture(scope="session")
def stack_factory(pytestconfig: pytest.Config, tmp_path_factory: pytest.TempPathFactory) -> Iterator[StackFactory]:
    factory = StackFactory(pytestconfig.stash[_TARGET], pytestconfig.getoption("--port-base"), tmp_path_factory.mktemp("stacks"))
    try:
        yield factory
    finally:
        factory.stop_all()


@pytest.fixture(scope="session")
def stack(stack_factory: StackFactory) -> Target:
    """The stack under test, shared by the session (pdsim defects from the environment)."""
    return stack_factory.start(defects=os.environ.get("PDSIM_DEFECTS", ""))


# ---- per-test rig: history, sampler, faults, workload ---------------------------------------


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    choice = config.stash[_TARGET]
    have = choice.capabilities()
    for item in items:
        # every needs() that applies (module and function alike), not only the closest one
        needed = {Capability(c) for needs in item.iter_markers("needs") for c in needs.args}
        missing = sorted((c for c in needed if c not in have), key=lambda c: c.value)
        if missing:
            item.add_marker(pytest.mark.skip(reason="; ".join(choice.missing_reason(c) for c in missing)))


_RUN_DIR = pytest.StashKey[Path]()
_RESULTS = pytest.StashKey[list]()
_PHASES = pytest.StashKey[dict]()


def _run_dir(config: pytest.Config) -> Path:
    """reports/<run-id>/ (shared by xdist workers through PDCHAOS_RUN_ID)."""
    if _RUN_DIR not in config.stash:
        root = Path(config.getoption("--reports-dir")).resolve()
        run_id = os.environ.setdefault("PDCHAOS_RUN_ID", time.strftime("%Y%m%d-%H%M%S") + f"-{os.getpid()}")
        path = root / run_id
        path.mkdir(parents=True, exist_ok=True)
        config.stash[_RUN_DIR] = path
    return config.stash[_RUN_DIR]


RIG_ERROR = "pdchaos_rig_error"  # a call-phase report's user property: the rig failed, no verdict did


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # type: ignore[no-untyped-def]
    """A rig error in the test body (a trigger that never fired, a fault not applied, a
    premise not met) is marked, so that it is reported as an error, never as a failed
    verdict; with ``--stop-at-verdict`` the first failed verdict ends the session."""
    outcome = yield
    rep = outcome.get_result()
    error = call.excinfo.value if call.excinfo is not None else None
    if call.when == "call" and rep.failed and isinstance(error, RigError):
        mark = (RIG_ERROR, f"{type(error).__name__}: {str(error).splitlines()[0][:200] if str(error) else ''}")
        rep.user_properties.append(mark)  # for this report's status
        item.user_properties.append(mark)  # for the teardown report, whose properties JUnit XML writes
    if call.when == "call" and rep.failed and isinstance(error, VerdictFailed) and item.config.getoption("--stop-at-verdict"):
        item.session.shouldstop = f"a verdict failed in {item.nodeid}"
    item.stash.setdefault(_PHASES, {})[call.when] = rep


def rig_error(rep: pytest.TestReport) -> str:
    """The rig error a report carries ("" for none)."""
    return next((str(v) for k, v in rep.user_properties if k == RIG_ERROR), "")


def pytest_report_teststatus(report: pytest.TestReport, config: pytest.Config) -> tuple[str, str, str] | None:
    """The terminal and the session's counts show a call-phase rig error as an error."""
    if report.when == "call" and report.failed and rig_error(report):
        return "error", "E", "ERROR"
    return None


def _outcome(item: pytest.Item) -> tuple[str, float, str, str]:
    """(outcome, call duration, xfail reason, first line of the failure) of the call phase."""
    phases = item.stash.get(_PHASES, {})
    setup, call = phases.get("setup"), phases.get("call")
    rep = call or setup
    if rep is None:
        return "unknown", 0.0, "", ""
    reason = getattr(rep, "wasxfail", "") or ""
    if reason:
        outcome = "xfailed" if rep.skipped else "xpassed"
    elif rep.failed:
        outcome = "failed" if rep is call and not rig_error(rep) else "error"
    else:
        outcome = rep.outcome
    message = str(rep.longrepr).splitlines()[-1][:300] if rep.failed and rep.longrepr else ""
    return outcome, getattr(call, "duration", 0.0) or 0.0, reason, message


@pytest.fixture
def history(request: pytest.FixtureRequest, seed: int, stack: Target) -> Iterator[History]:
    """This test's history, written as JSONL under reports/<run-id>/<test>/history.jsonl.
    At teardown the engine and router log lines about its requests join it, and the test's
    report (result.json, timeline.png, stuck.md) is drawn from it."""
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", request.node.nodeid)[-150:]
    folder = _run_dir(request.config) / safe
    folder.mkdir(parents=True, exist_ok=True)
    h = History(path=folder / "history.jsonl", seed=seed)
    cursor = LogCursor(stack.logs, ("prefill", "decode", "router"))
    try:
        yield h
    finally:
        try:
            capture_logs(h, cursor, {op.invoke.op for op in h.ops()})
            outcome, duration, reason, message = _outcome(request.node)
            stack_id = f"{stack.info.kind}:{stack.info.port_base}:{stack.info.run_id}"
            result = result_of(h, nodeid=request.node.nodeid, outcome=outcome, duration_s=duration, known_issue=reason, message=message, stack=stack_id)
            write_test_report(folder, h, result)
            request.config.stash[_RESULTS].append(result)
        finally:
            h.close()


def _results(config: pytest.Config) -> list[dict[str, Any]]:
    """This process's test results; under xdist the controller has none of its own, so it
    reads what the workers wrote into the shared run folder."""
    results = config.stash.get(_RESULTS, [])
    if results or not config.pluginmanager.hasplugin("dsession"):  # dsession: the xdist controller
        return results
    import json

    results[:] = [json.loads(p.read_text()) for p in sorted(_run_dir(config).glob("*/result.json"))]  # read once, for summary and table
    return results


def pytest_sessionfinish(session: pytest.Session) -> None:
    config = session.config
    if os.environ.get("PYTEST_XDIST_WORKER"):
        return
    results = _results(config)
    if not results:
        return
    run_dir = _run_dir(config)
    command = "pytest " + " ".join(config.invocation_params.args)
    write_run_summary(run_dir, results, seed=config.stash[_SEED], command=command)
    latest = run_dir.parent / "latest"
    if latest.is_symlink() or not latest.exists():
        latest.unlink(missing_ok=True)
        latest.symlink_to(run_dir.name)


def pytest_terminal_summary(terminalreporter, config: pytest.Config) -> None:  # type: ignore[no-untyped-def]
    results = _results(config)
    if not results:
        return
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    table = Table(title=f"pd-chaos: {len(results)} tests with histories (seed {config.stash[_SEED]})")
    for col in ("test", "outcome", "s", "requests", "verdicts not passed"):
        table.add_column(col, overflow="fold")
    for r in results:
        bad = "; ".join(v["name"].split("(")[0] for v in r["verdicts"] if v["status"] != "pass")
        reqs = " ".join(f"{k}={n}" for k, n in sorted(r["requests"].items()))
        table.add_row(escape(r["test"].split("::")[-1]), r["outcome"], f"{r['duration_s']:.1f}", escape(reqs), escape(bad))
    Console(file=terminalreporter._tw._file, width=160).print(table)
    terminalreporter.write_line(f"reports: {_run_dir(config)}")


@pytest.fixture
def sampler(stack: Target, history: History) -> Iterator[Sampler]:
    s = Sampler(history, metrics_urls(stack.info.endpoints)).start()
    # a baseline of every source before the body acts; a source still silent after this is
    # judged from what it has: verdicts needing a sample before the fault then say unknown
    s.poll(lambda: all(s.latest(name) is not None for name in s.urls), timeout_s=5.0)
    try:
        yield s
    finally:
        s.stop()


@pytest.fixture
def faults(stack: Target, history: History, sampler: Sampler) -> Iterator[Faults]:
    """Faults as context managers; whatever is still active is healed at teardown."""
    client = ToxiproxyClient(stack.info.endpoints["toxiproxy"]) if "toxiproxy" in stack.info.endpoints else None
    f = Faults(stack, history, sampler, client)
    try:
        yield f
    finally:
        try:
            with shielded():
                f.heal_all()
        finally:
            if client is not None:
                client.close()


@pytest.fixture
def workload(stack: Target, history: History, seed: int) -> Workload:
    """The test's client. The target must first serve a request (steady state), so that one
    test's aftermath (say, an open circuit breaker) never leaks into the next test's verdicts."""
    model = served_model(stack.info)
    scratch = Workload(stack.info.endpoints["client"], History(), seed, model=model)
    reply = scratch.probe_until_ok(within_s=Bounds.of(stack.info).recovery_s)
    if not reply.ok:
        raise TargetError(f"target not in steady state before the test: last probe {reply.outcome.value} {reply.error[:200]}")
    return Workload(stack.info.endpoints["client"], history, seed, model=model)


@pytest.fixture
def bounds(stack: Target) -> Bounds:
    return Bounds.of(stack.info)
