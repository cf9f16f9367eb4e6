"""The house: chaos/ is in wings, and a wing imports only the wings below it, with no
circle between modules (issue 40). Read from the source, every import counted, those inside
functions too: a lazy import is an arrow all the same."""

from __future__ import annotations

import ast
from pathlib import Path

from chaos.system.tools import REPO_ROOT

# Bottom up: what each wing (or top-level module) may import is what ranks at or below it.
RANK = {
    "errors": 0,
    "upstream": 0,
    "system": 0,
    "observe": 1,
    "clients": 2,
    "targets": 2,
    "faults": 2,
    "judge": 3,
    "verdicts": 3,
    "run": 4,
    "explore": 4,
    "doctor": 4,
    "reports": 4,
    "cli": 5,
}


def _module(path: Path) -> str:
    parts = path.relative_to(REPO_ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports() -> dict[str, set[str]]:
    """Each chaos module -> the chaos modules it imports (a package's name stands for its
    ``__init__``)."""
    graph: dict[str, set[str]] = {}
    for path in sorted((REPO_ROOT / "chaos").rglob("*.py")):
        names: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "chaos":
                names.add(node.module)
            elif isinstance(node, ast.Import):
                names |= {a.name for a in node.names if a.name.split(".")[0] == "chaos"}
        graph[_module(path)] = names
    return graph


def _wing(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


def test_every_module_lives_in_a_wing_the_layout_names():
    wings = {_wing(m) for m in _imports()} - {None}
    assert wings <= set(RANK), wings - set(RANK)
    flat = sorted(p.stem for p in (REPO_ROOT / "chaos").glob("*.py") if p.stem != "__init__")
    assert flat == ["cli", "errors", "upstream", "verdicts"], flat  # everything else is in a wing


def test_no_wing_imports_one_above_it():
    up = [
        f"{module} ({_wing(module)}) imports {name} ({_wing(name)})"
        for module, names in _imports().items()
        for name in names
        if (w := _wing(module)) and (t := _wing(name)) and RANK[t] > RANK[w]
    ]
    assert not up, "\n".join(up)


def test_no_circle_between_modules():
    imports = _imports()
    graph = {m: {n for n in names if n in imports} - {m} for m, names in imports.items()}
    state: dict[str, int] = {}  # 1 on the path being walked, 2 done
    circles: list[str] = []

    def walk(module: str, path: list[str]) -> None:
        state[module] = 1
        for name in sorted(graph[module]):
            if state.get(name) == 1:
                circles.append(" -> ".join([*path[path.index(name) :], name]))
            elif name not in state:
                walk(name, [*path, name])
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            walk(module, [module])
    # a package's __init__ re-exporting its own modules is not a circle of ideas
    circles = [c for c in circles if not all(part.startswith(c.split(" -> ")[0]) for part in c.split(" -> "))]
    assert not circles, "\n".join(circles)
