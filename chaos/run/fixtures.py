"""The per-test rig as pytest fixtures: the session's stack, and for each test its history,
sampler, faults, workload, bounds and scenario; and the hook that judges a scenario once its
body has ended, whether it returned or raised (``chaos.run.scenario``)."""

from __future__ import annotations

import re
from typing import Any, Iterator

import pytest

from chaos.clients.workloads import Workload
from chaos.errors import TargetError
from chaos.faults import Faults
from chaos.observe.history import History
from chaos.observe.logs import LogCursor, capture_logs, save_logs
from chaos.observe.router_health import close_breakers, wait_out_failed_checks
from chaos.observe.sampler import Sampler, metrics_urls
from chaos.reports.summary import result_of, write_test_report
from chaos.run.bounds import Bounds
from chaos.run.run_report import add_result, outcome_of, run_dir
from chaos.run.scenario import Scenario
from chaos.run.session import SEED, SOAK, TARGET, TOPOLOGY, xdist_worker
from chaos.run.skips import SkipKind, skip
from chaos.run.soak import Soak
from chaos.run.stack_factory import StackFactory, session_defects
from chaos.system.cleanup import shielded
from chaos.system.limits import activity
from chaos.targets.base import Capability, Target
from chaos.targets.bringup import served_model
from chaos.targets.toxiproxy import ToxiproxyClient
from chaos.verdicts import KnownIssue, KnownIssueSeen


@pytest.fixture(scope="session")
def seed(pytestconfig: pytest.Config) -> int:
    return pytestconfig.stash[SEED]


@pytest.fixture
def soak(pytestconfig: pytest.Config) -> Soak:
    """The soak's clock; the test skips unless ``--soak DURATION`` was given (opt-in)."""
    chosen = pytestconfig.stash[SOAK]
    if chosen is None:
        skip(SkipKind.OPT_IN, "opt-in: pass --soak DURATION (e.g. pytest suites --soak 30m -k soak)")
    return chosen


@pytest.fixture(scope="session")
def stack_factory(pytestconfig: pytest.Config, tmp_path_factory: pytest.TempPathFactory) -> Iterator[StackFactory]:
    # ports per worker; a pytest run inside a test is no worker: its ports are where --port-base says
    worker = xdist_worker(pytestconfig) or "gw0"
    factory = StackFactory(
        pytestconfig.stash[TARGET],
        pytestconfig.getoption("--port-base"),
        tmp_path_factory.mktemp("stacks"),
        worker=worker,
        record_dir=run_dir(pytestconfig) / "stacks",
        overrides={
            **({"kv_checksum": True} if pytestconfig.getoption("--kv-checksum") else {}),
            **({"topology": topology} if (topology := pytestconfig.stash[TOPOLOGY]) is not None else {}),
        },
    )
    try:
        yield factory
    finally:
        factory.stop_all()


@pytest.fixture(scope="session")
def stack(request: pytest.FixtureRequest, stack_factory: StackFactory) -> Target:
    """The stack under test, shared by the session (pdsim defects from the environment).

    A module whose own ``stack`` fixture takes params hands them to this one too (pytest
    matches params by name), and pytest would start a new session stack for each param
    while the old one kept running: refused, so that the module parametrizes another name."""
    if getattr(request, "param", None) is not None:
        raise pytest.UsageError(
            f"{request.node.nodeid}: a fixture named `stack` takes params ({request.param!r}); "
            "put them on a fixture of another name that the module's `stack` requests"
        )
    return stack_factory.start(defects=session_defects())


KNOWN_SEEN = pytest.StashKey[
    list[dict[str, Any]]
]()  # the known issues a test showed, with their evidence, for result.json


@pytest.fixture
def engine_logs(stack: Target) -> LogCursor:
    """Where the engines' (every one of its topology) and the router's logs stood when the test began."""
    return LogCursor(stack.logs, (*stack.info.topology.engines, "router"))


@pytest.fixture
def history(request: pytest.FixtureRequest, seed: int, stack: Target, engine_logs: LogCursor) -> Iterator[History]:
    """This test's history, written as JSONL under reports/<run-id>/<test>/history.jsonl.
    At teardown the engine and router log lines about its requests join it (those a
    scenario's verdicts read joined it before they were judged), and the test's report
    (result.json, timeline.png, stuck.md) is drawn from it."""
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", request.node.nodeid)[-150:]
    folder = run_dir(request.config) / safe
    folder.mkdir(parents=True, exist_ok=True)
    h = History(path=folder / "history.jsonl", seed=seed)
    try:
        yield h
    finally:
        try:
            capture_logs(h, engine_logs, {op.invoke.op for op in h.ops()})
            outcome, duration, reason, message = outcome_of(request.node)
            if outcome in ("failed", "error"):
                save_logs(folder / "logs", engine_logs)
            stack_id = f"{stack.info.kind}:{stack.info.port_base}:{stack.info.run_id}"
            result = result_of(
                h,
                nodeid=request.node.nodeid,
                outcome=outcome,
                duration_s=duration,
                known_issue=reason,
                known=request.node.stash.get(KNOWN_SEEN, []),
                message=message,
                stack=stack_id,
            )
            write_test_report(folder, h, result)
            add_result(request.config, result)
        finally:
            h.close()


@pytest.fixture
def sampler(stack: Target, history: History) -> Iterator[Sampler]:
    s = Sampler(history, metrics_urls(stack.info.endpoints)).start()
    # a baseline of every source before the body acts; a source still silent after this is
    # judged from what it has: verdicts needing a sample before the fault then say unknown
    s.poll(
        lambda: all(s.latest(name) is not None for name in s.urls), timeout_s=5.0, what="a first sample of every source"
    )
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


def ensure_steady(stack: Target) -> str:
    """Wait until the target serves a request (steady state), within its recovery bound, so
    that one test's aftermath (say, an open circuit breaker) never leaks into the next one;
    a target that does not is a ``TargetError``. Where smg's health checks failed since the
    last test, also until the check in flight at the heal has landed and passed, and until
    every circuit breaker of smg's is closed again (``chaos.observe.router_health``). Returns the
    served model's name."""
    model = served_model(stack.info)
    scratch = Workload(stack.info.endpoints["client"], History(), 0, model=model)
    recovery_s = Bounds.of(stack.info).recovery_s
    with activity("steady state before the test"):
        reply = scratch.probe_until_ok(within_s=recovery_s)
        if reply.ok and "router_metrics" in stack.info.endpoints:
            wait_out_failed_checks(stack.info.endpoints["router_metrics"], timeout_s=recovery_s)
            close_breakers(
                stack.info.endpoints["router_metrics"],
                lambda: scratch.probe_until_ok(within_s=recovery_s),
                timeout_s=recovery_s,
            )
    if not reply.ok:
        raise TargetError(
            f"target not in steady state before the test: last probe {reply.outcome.value} {reply.error[:200]}"
        )
    return model


@pytest.fixture
def workload(stack: Target, history: History, seed: int) -> Workload:
    """The test's client, once the target is steady (``ensure_steady``)."""
    return Workload(stack.info.endpoints["client"], history, seed, model=ensure_steady(stack))


@pytest.fixture
def bounds(stack: Target) -> Bounds:
    return Bounds.of(stack.info)


@pytest.fixture
def scenario(
    stack: Target, history: History, sampler: Sampler, workload: Workload, bounds: Bounds, engine_logs: LogCursor
) -> Scenario:
    """The scenario kit (``chaos.run.scenario``): verdicts declared in the body are judged from
    the history once the body ends."""
    return Scenario(stack, history, sampler, workload, bounds, engine_logs=engine_logs)


@pytest.hookimpl(wrapper=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> Iterator[None]:
    """Run, then judge: a scenario's verdicts run after its body, even when the body raised
    (the history then still says what it proves; the body's error stays the outcome). A
    verdict a ``known_issue`` mark names (on a target lacking its ``lacking`` capability, if
    it names one), failing alone, makes the test xfail with the issue's words; passing, it
    fails the test (strict)."""
    scenario = pyfuncitem.funcargs.get("scenario")
    try:
        result = yield
    except Exception:
        if isinstance(scenario, Scenario):
            scenario.conclude(body_failed=True)
        raise
    if isinstance(scenario, Scenario):
        known = known_issues(pyfuncitem, scenario)
        try:
            scenario.conclude(body_failed=False, known=known)
        except KnownIssueSeen as seen:
            pyfuncitem.stash[KNOWN_SEEN] = [issue.as_json(got) for issue, got in seen.seen]
            pytest.xfail(str(seen))
    return result


def known_issues(item: pytest.Item, scenario: Scenario) -> list[KnownIssue]:
    """The ``known_issue`` marks that apply to this target (one lacking the capability a
    mark's ``lacking`` names, if it names one)."""
    out = []
    for m in item.iter_markers("known_issue"):
        lacking = m.kwargs.get("lacking")
        if lacking is None or not scenario.has(Capability(lacking)):
            out.append(
                KnownIssue(
                    m.args[0],
                    m.kwargs["component"],
                    m.kwargs["version"],
                    m.kwargs["behaviour"],
                    m.kwargs["evidence"],
                    m.kwargs.get("params", {}),
                    m.kwargs.get("strict", True),
                )
            )
    return out
