"""The pytest plugin: options, markers and the stack fixtures.

Loaded by the root ``conftest.py``. Options live in one ``pdchaos`` group:
``--target`` (``embedded`` now; compose and attach targets come beside it), ``--seed``
and ``--port-base``. Every stack a session starts is stopped at session end, whatever
happened.
"""

from __future__ import annotations

import os
import random
from dataclasses import replace
from pathlib import Path
from typing import Any, Iterator

import pytest

from chaos.ports import PortAllocator
from chaos.stack import StackConfig, Timeouts
from chaos.targets.embedded import EmbeddedStack

__all__ = ["StackFactory"]

TARGETS = ("embedded",)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("pdchaos", "pd-chaos")
    group.addoption("--target", default=os.environ.get("PDCHAOS_TARGET", "embedded"), help=f"target to test: {', '.join(TARGETS)} (env PDCHAOS_TARGET)")
    group.addoption("--seed", type=int, default=None, help="seed for every random choice of the rig (default: random, printed in the header)")
    group.addoption("--port-base", type=int, default=int(os.environ.get("PDCHAOS_PORT_BASE", "42000")), help="first port of the range embedded stacks use (default 42000)")


_SEED = pytest.StashKey[int]()


def pytest_configure(config: pytest.Config) -> None:
    target = config.getoption("--target")
    if target not in TARGETS:
        raise pytest.UsageError(f"--target {target!r} is unknown; known targets: {', '.join(TARGETS)}")
    seed = config.getoption("--seed")
    config.stash[_SEED] = seed if seed is not None else random.SystemRandom().randrange(1 << 31)


def pytest_report_header(config: pytest.Config) -> str:
    return f"pd-chaos: target={config.getoption('--target')} seed={config.stash[_SEED]} port-base={config.getoption('--port-base')}"


class StackFactory:
    """Starts embedded stacks on free ports with chosen overrides; stops all of them at the end."""

    def __init__(self, port_base: int, state_root: Path) -> None:
        self._ports = PortAllocator(port_base)
        self._root = state_root
        self._stacks: list[EmbeddedStack] = []

    def start(self, *, defects: str = "", timeouts: Timeouts | None = None, **overrides: Any) -> EmbeddedStack:
        base = self._ports.next_base()
        cfg = StackConfig(port_base=base, state_dir=self._root / f"stack-{base}", defects=defects)
        if timeouts is not None:
            cfg = replace(cfg, timeouts=timeouts)
        stack = EmbeddedStack.up(replace(cfg, **overrides))
        self._stacks.append(stack)
        return stack

    def stop(self, stack: EmbeddedStack) -> None:
        if stack in self._stacks:
            self._stacks.remove(stack)
            stack.down()

    def stop_all(self) -> None:
        errors = []
        while self._stacks:
            try:
                self._stacks.pop().down()
            except Exception as exc:  # keep stopping the others
                errors.append(exc)
        if errors:
            raise errors[0]


@pytest.fixture(scope="session")
def seed(pytestconfig: pytest.Config) -> int:
    return pytestconfig.stash[_SEED]


@pytest.fixture(scope="session")
def stack_factory(pytestconfig: pytest.Config, tmp_path_factory: pytest.TempPathFactory) -> Iterator[StackFactory]:
    factory = StackFactory(pytestconfig.getoption("--port-base"), tmp_path_factory.mktemp("stacks"))
    try:
        yield factory
    finally:
        factory.stop_all()


@pytest.fixture(scope="session")
def stack(stack_factory: StackFactory) -> EmbeddedStack:
    """The clean embedded stack, shared by the session (defects from the environment)."""
    return stack_factory.start(defects=os.environ.get("PDSIM_DEFECTS", ""))
