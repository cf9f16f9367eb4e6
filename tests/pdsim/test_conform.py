"""pdsim against real SGLang, where both can be asked the same question without a stack:
how each timeout and switch variable is parsed (SGLang 0.5.23's ``srt/environ.py``, run in the
sglang-cpu venv, against ``pdsim/environ.py``). What a running engine answers is diffed
by ``pdchaos conform`` (``tests/targets/test_sglang_cpu.py``)."""

from __future__ import annotations

import json
import warnings
from typing import Any, Callable

import pytest

from chaos.system.procs import run
from chaos.targets.sglang_cpu import SGLANG_HOME
from pdsim.environ import env_bool, env_float, env_int

VARIABLES = {  # name -> SGLang's type and default
    "SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT": ("int", 300),
    "SGLANG_DISAGGREGATION_WAITING_TIMEOUT": ("int", 300),
    "SGLANG_DISAGGREGATION_HEARTBEAT_INTERVAL": ("float", 5.0),
    "SGLANG_DISAGGREGATION_HEARTBEAT_MAX_FAILURE": ("int", 2),
    "SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION": ("bool", True),
}
VALUES = [None, "3", "3.0", "", "abc", " 4 ", "-1", "2.5", "False", "YES", "0"]

SGLANG_SIDE = """
import json, os, sys, warnings
from sglang.srt.environ import envs
out = []
for name, value in json.loads(sys.argv[1]):
    os.environ.pop(name, None)
    if value is not None:
        os.environ[name] = value
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        got = getattr(envs, name).get()
    out.append([got, [str(x.message) for x in w]])
print(json.dumps(out))
"""


def _sglang(cases: list[tuple[str, str | None]]) -> list[list[object]]:
    done = run([str(SGLANG_HOME / "venv" / "bin" / "python"), "-c", SGLANG_SIDE, json.dumps(cases)], timeout_s=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _pdsim(cases: list[tuple[str, str | None]], monkeypatch: pytest.MonkeyPatch) -> list[list[object]]:
    out = []
    for name, value in cases:
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)
        kind, default = VARIABLES[name]
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            parse: Callable[[str, Any], Any] = {"int": env_int, "float": env_float, "bool": env_bool}[kind]
            got = parse(name, default)
        out.append([got, [str(x.message) for x in w]])
    return out


@pytest.mark.skipif(
    not (SGLANG_HOME / "venv" / "bin" / "python").exists(), reason="real SGLang not set up: run `make setup-sglang`"
)
def test_timeout_variables_parse_as_in_sglang(monkeypatch):
    cases = [(name, value) for name in VARIABLES for value in VALUES]
    want, got = _sglang(cases), _pdsim(cases, monkeypatch)
    diff = [(case, w, g) for case, w, g in zip(cases, want, got, strict=True) if w != g]
    assert not diff, "pdsim parses differently from SGLang:\n" + "\n".join(
        f"{c}: sglang {w} pdsim {g}" for c, w, g in diff
    )
    assert want[VALUES.index("3.0")] == [
        300,
        [
            'Invalid value for SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT: "3.0" is not a valid integer value, using default "300"'
        ],
    ]
