"""The pytest plugin's entry: options, markers, the target and seed of the session, and
``needs()`` skips. Loaded by the root ``conftest.py``; it loads the rest:
``chaos.run.fixtures`` (the per-test rig and the scenario judge) and ``chaos.run.run_report``.

Options live in one ``pdchaos`` group: ``--target`` (see ``chaos.targets.registry``;
``attach`` with ``--stack-file`` and ``--allow-destructive``), ``--seed``, ``--port-base``,
``--stop-at-verdict``, ``--shuffle``, ``--soak`` (the opt-in soak's duration), ``--explore`` (explore's budget) and
``--reports-dir``.
Every stack a session starts is stopped at session end, whatever happened; an attached
deployment is left as it was found. Each phase of each test runs under the time limit its
own waits give it (``chaos.system.limits``), unless ``--timeout`` hands it to pytest-timeout.
"""

from __future__ import annotations

import os
import random
from pathlib import Path
from typing import Iterator

import pytest

from chaos.errors import ConfigError
from chaos.explore.budget import Budget
from chaos.run.session import EXPLORE, IDLE, SEED, SOAK, TARGET, TOPOLOGY
from chaos.run.skips import MARKED, SkipKind
from chaos.run.soak import Soak, parse_duration
from chaos.system.cleanup import terminate_as_interrupt
from chaos.system.limits import BASE_S, PhaseLimit
from chaos.system.ports import BASES, ephemeral_overlap
from chaos.system.topology import Topology
from chaos.targets.base import Capability
from chaos.targets.gpu import GPU
from chaos.targets.registry import TARGETS, TargetChoice, reap_orphans

pytest_plugins = ["chaos.run.run_report", "chaos.run.fixtures"]  # in import order: fixtures imports run_report

MARKERS = (
    "fault(family): the fault family a scenario exercises (process, network, client, engine, load, random)",
    "needs(*capabilities): capabilities the target must have ("
    + ", ".join(c.value for c in Capability)
    + "); the test skips with a reason otherwise",
    "smoke: one scenario for each way a target starts a stack and injects a fault (a toxic, a proxy down, kill, restart, freeze, SIGTERM, a client hanging up): `-m smoke` shows in minutes that a target's driver carries every fault; the verdicts are the suites' own",
    "known_issue(verdict, component=..., version=..., behaviour=..., evidence={...}, params={}, lacking=None, strict=True): a known upstream behaviour fails the verdict of this kind (with these params; on targets lacking the capability `lacking`, if given), leaving evidence of this shape (chaos.judge.known.evidence_fits): failing alone so it makes the test xfail with its evidence; failing with other evidence it fails the test; passing, it fails the test (strict) unless strict=False (a race that shows in some runs only)",
)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("pdchaos", "pd-chaos")
    group.addoption(
        "--target",
        default=os.environ.get("PDCHAOS_TARGET", "embedded"),
        help=f"target to test: {', '.join(TARGETS)} (env PDCHAOS_TARGET)",
    )
    group.addoption(
        "--stack-file",
        type=Path,
        default=os.environ.get("PDCHAOS_STACK_FILE"),
        help="with --target attach: the YAML file describing the deployment (env PDCHAOS_STACK_FILE)",
    )
    group.addoption(
        "--allow-destructive",
        action="store_true",
        help="with --target attach: let faults kill, freeze and restart services of a stack pd-chaos did not start",
    )
    group.addoption(
        "--seed",
        type=int,
        default=None,
        help="seed for every random choice of the rig (default: random, printed in the header)",
    )
    group.addoption(
        "--port-base",
        type=int,
        default=int(os.environ.get("PDCHAOS_PORT_BASE", BASES["pytest"])),
        help=f"first port of the range the session's stacks use (default {BASES['pytest']})",
    )
    group.addoption(
        "--kv-checksum",
        action="store_true",
        help="start the session's stacks with the engines' KV checksum on (--disaggregation-enable-kv-checksum "
        "on both; off by default, as upstream): the local targets, compose and compose-sglang-cpu",
    )
    group.addoption(
        "--topology",
        default=None,
        metavar="NpMd",
        help="start the session's stacks with N prefills and M decodes (1p1d, 2p1d, 1p2d, 2p2d; default 1p1d): "
        "faults name the first engine of each kind as prefill and decode, the others prefill2, decode2 "
        "(embedded, sglang-cpu)",
    )
    group.addoption(
        "--stop-at-verdict",
        action="store_true",
        help="end the session at the first failed verdict (not at a rig error): the kill matrix's -x",
    )
    group.addoption(
        "--shuffle",
        action="store_true",
        help="run the modules, and the tests in each, in an order drawn from --seed: a test may not depend on what ran before it",
    )
    group.addoption(
        "--soak",
        default=None,
        metavar="DURATION",
        help="run the opt-in soak scenario for this long (90s, 30m, 2h); it skips without it",
    )
    group.addoption(
        "--idle",
        default=None,
        metavar="DURATION",
        help="the idle-burst suite also holds one idle this long (10m, 1h: a nightly run's); "
        "without it, only the idles past the path's keep-alives and pools (seconds to a minute)",
    )
    group.addoption(
        "--explore",
        default=None,
        metavar="BUDGET",
        help="run explore (suites/test_explore.py) for a time (3m) or a number of episodes; it skips without it",
    )
    parser.addini(
        "pdchaos_limit_base_s",
        f"seconds a test phase may spend on the rig's own work between bounded waits (default {BASE_S:g}; chaos.system.limits)",
        default=str(BASE_S),
    )
    group.addoption(
        "--reports-dir",
        default=os.environ.get("PDCHAOS_REPORTS", "reports"),
        help="where run reports and histories go (default reports/)",
    )


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    for line in MARKERS:
        config.addinivalue_line("markers", line)
    try:
        choice = TargetChoice(
            config.getoption("--target"), config.getoption("--stack-file"), config.getoption("--allow-destructive")
        )
        choice.capabilities()  # an attach target's stack file is read (and checked) here
        _ = choice.stacks_at_once  # a GPU target's PDCHAOS_GPUS is read (and checked) here
    except ConfigError as exc:
        raise pytest.UsageError(str(exc)) from None
    config.stash[TARGET] = choice
    soak = config.getoption("--soak")
    try:
        config.stash[SOAK] = Soak(parse_duration(soak)) if soak else None
    except ValueError as exc:
        raise pytest.UsageError(f"--soak: {exc}") from None
    idle = config.getoption("--idle")
    try:
        config.stash[IDLE] = parse_duration(idle) if idle else None
    except ValueError as exc:
        raise pytest.UsageError(f"--idle: {exc}") from None
    explore = config.getoption("--explore")
    try:
        config.stash[EXPLORE] = Budget.parse(explore) if explore else None
    except ConfigError as exc:
        raise pytest.UsageError(f"--explore: {exc}") from None
    topology = config.getoption("--topology")
    try:
        config.stash[TOPOLOGY] = Topology.parse(topology) if topology else None
    except ConfigError as exc:
        raise pytest.UsageError(f"--topology: {exc}") from None
    if topology and not choice.runs_topologies:
        raise pytest.UsageError(
            f"--topology needs a target that starts several engines of a kind: target {choice.name} cannot"
        )
    if config.getoption("--kv-checksum") and not choice.sets_engine_options:
        raise pytest.UsageError(
            f"--kv-checksum needs a target that starts its engines with options: target {choice.name} cannot turn it on"
        )
    seed = config.getoption("--seed")
    parallel = getattr(config, "workerinput", None) is not None or bool(getattr(config.option, "numprocesses", None))
    if choice.name in GPU and parallel:
        raise pytest.UsageError(
            f"--target {choice.name} runs one pytest process: each xdist worker would take the whole "
            "PDCHAOS_GPUS pool for its own stacks, and two would start engines on the same GPUs; drop -n"
        )
    if config.getoption("--shuffle") and seed is None and parallel:
        raise pytest.UsageError("--shuffle with xdist needs --seed: every worker must draw the same order")
    config.stash[SEED] = seed if seed is not None else random.SystemRandom().randrange(1 << 31)
    terminate_as_interrupt()
    reap_orphans()


def pytest_report_header(config: pytest.Config) -> list[str]:
    base = config.getoption("--port-base")
    warning = ephemeral_overlap(base)
    return [
        f"pd-chaos: target={config.getoption('--target')} seed={config.stash[SEED]} port-base={base}",
        *([f"pd-chaos: WARNING {warning}"] if warning else []),
    ]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    choice = config.stash[TARGET]
    have = choice.capabilities()
    for item in items:
        # every needs() that applies (module and function alike), not only the closest one
        needed = {Capability(c) for needs in item.iter_markers("needs") for c in needs.args}
        missing = sorted((c for c in needed if c not in have), key=lambda c: c.value)
        if missing:
            item.add_marker(pytest.mark.skip(reason="; ".join(choice.missing_reason(c) for c in missing)))
            item.stash[MARKED] = SkipKind.CAPABILITY
    if config.getoption("--shuffle"):
        items[:] = shuffled(items, config.stash[SEED])
    if choice.stacks_at_once == 1:
        # one stack at a time (two GPUs): modules with a stack of their own run first, each
        # stack down when its module ends, and the session's stack starts after them
        items.sort(key=lambda item: not _own_stack(item))


def shuffled(items: list[pytest.Item], seed: int) -> list[pytest.Item]:
    """``items`` with their modules in an order drawn from ``seed``, and the tests of each
    module too; a module's tests stay together, so that a module's own stack starts once.
    The same seed gives the same order, printed in the header as every seed is."""
    rng = random.Random(f"pd-chaos shuffle {seed}")
    modules: dict[str, list[pytest.Item]] = {}
    for item in items:
        modules.setdefault(item.nodeid.split("::")[0], []).append(item)
    order = list(modules)
    rng.shuffle(order)
    out: list[pytest.Item] = []
    for name in order:
        tests = modules[name]
        rng.shuffle(tests)
        out += tests
    return out


def _own_stack(item: pytest.Item) -> bool:
    """Whether the test's ``stack`` is its module's own (a module-scoped override of the
    session's fixture, as suites/test_overload.py's)."""
    info = getattr(item, "_fixtureinfo", None)
    defs = list(info.name2fixturedefs.get("stack", ())) if info is not None else []
    return bool(defs) and defs[-1].scope == "module"


def _explicit_timeout(item: pytest.Item) -> bool:
    """Whether pytest-timeout was asked to time this test (``--timeout``, ``PYTEST_TIMEOUT``,
    its ini key or a ``timeout`` mark): then it does, and no limit of ours runs beside it."""
    config = item.config
    if item.get_closest_marker("timeout") is not None or os.environ.get("PYTEST_TIMEOUT"):
        return True
    try:
        return config.getoption("timeout") is not None or bool(config.getini("timeout"))
    except ValueError:  # pytest-timeout is not installed
        return False


def _limited(item: pytest.Item, phase: str) -> Iterator[None]:
    """One pytest phase under its own limit (``chaos.system.limits``)."""
    base_s = float(item.config.getini("pdchaos_limit_base_s"))
    limit = None if _explicit_timeout(item) else PhaseLimit(f"{phase} of {item.nodeid}", base_s=base_s).arm()
    try:
        return (yield)
    finally:
        if limit is not None:
            limit.disarm()


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    return (yield from _limited(item, "setup"))


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    return (yield from _limited(item, "call"))


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_teardown(item: pytest.Item) -> Iterator[None]:
    return (yield from _limited(item, "teardown"))
