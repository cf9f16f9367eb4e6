"""Each pdsim defect bends one behaviour, and no behaviour is bent by two defects or none.

The engine's paths read ``EngineConfig.behaviour``, never a defect (``pdsim.behaviour``), so
this table is where a defect is written; the black-box effect of each is shown in
test_defects.py and, by the verdict written for it, in the kill matrix.
"""

from __future__ import annotations

import ast
from dataclasses import fields
from pathlib import Path

import pytest

from pdsim.behaviour import CHANGES, Behaviour
from pdsim.config import EngineConfig, Mode
from pdsim.defects import Defect

PDSIM = Path(__file__).resolve().parents[2] / "pdsim"


def test_every_defect_changes_one_behaviour_and_every_behaviour_has_one_defect():
    assert set(CHANGES) == set(Defect)
    names = [name for name, _ in CHANGES.values()]
    assert sorted(names) == sorted(f.name for f in fields(Behaviour))  # each field once, none left over


@pytest.mark.parametrize("defect", list(Defect), ids=lambda d: d.value)
def test_a_defect_changes_its_field_and_no_other(defect):
    clean, bent = Behaviour(), Behaviour.with_defects(frozenset({defect}))
    changed = {f.name for f in fields(Behaviour) if getattr(clean, f.name) != getattr(bent, f.name)}
    assert changed == {CHANGES[defect][0]}, "a defect whose value is SGLang's own changes nothing"


def test_the_engine_reads_the_behaviour_its_defects_make():
    cfg = EngineConfig(Mode.DECODE, port=1, kv_port=2, defects=frozenset({Defect.STUCK_TRANSFERRING}))
    assert not cfg.behaviour.transferring_times_out and cfg.behaviour.inflight_watchdog
    assert EngineConfig(Mode.DECODE, port=1, kv_port=2).behaviour == Behaviour()


def test_no_engine_path_names_a_defect():
    """Only the defects' own modules and the configuration that parses them know the names."""
    knows = {"defects.py", "behaviour.py", "config.py"}
    naming = []
    for path in sorted(PDSIM.glob("*.py")):
        if path.name in knows:
            continue
        tree = ast.parse(path.read_text())
        naming += [f"{path.name}:{n.lineno}" for n in ast.walk(tree) if isinstance(n, ast.Name) and n.id == "Defect"]
    assert not naming, f"engine paths that name a defect instead of a behaviour: {naming}"
