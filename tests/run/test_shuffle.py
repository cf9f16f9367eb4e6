"""``--shuffle``: the modules, and the tests of each, in an order drawn from the seed."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

from chaos.run.plugin import shuffled


@dataclass
class _Item:
    nodeid: str


def _items() -> list[Any]:
    return [_Item(f"suites/test_{m}.py::test_{t}") for m in "abcd" for t in range(4)]


def _order(seed: int) -> list[str]:
    return [i.nodeid for i in shuffled(cast(list, _items()), seed)]


def test_the_same_seed_draws_the_same_order_and_another_seed_another():
    assert _order(1) == _order(1)
    assert _order(1) != _order(2)
    assert sorted(_order(1)) == sorted(i.nodeid for i in _items())  # nothing lost, nothing twice


def test_a_modules_tests_stay_together_so_its_stack_starts_once():
    modules = [nodeid.split("::")[0] for nodeid in _order(3)]
    runs = [m for k, m in enumerate(modules) if k == 0 or modules[k - 1] != m]
    assert len(runs) == 4 and len(set(runs)) == 4, runs
    within = [nodeid for nodeid in _order(3) if nodeid.startswith(runs[0])]
    assert runs != sorted(runs) or within != sorted(within), "seed 3 left the order as collected"
