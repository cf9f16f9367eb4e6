"""SGLang's environment variables, parsed as SGLang 0.5.23 parses them (``srt/environ.py``).

An ``EnvInt`` is ``int(value)``, so ``"3.0"`` is invalid; an ``EnvFloat`` is
``float(value)``. An unset variable gives the default; an invalid one (the empty string
too) gives the default with SGLang's warning, word for word, so that a rig that writes
``"3.0"`` sees its timeout silently become 300 s here exactly as on the real engine.
``tests/pdsim/test_conform.py`` holds these against SGLang's own parser.
"""

from __future__ import annotations

import os
import warnings
from typing import Callable, TypeVar

__all__ = ["env_bool", "env_float", "env_int"]

T = TypeVar("T", bool, int, float)


def _get(name: str, default: T, parse: Callable[[str], T], kind: str) -> T:
    value = os.environ.get(name)
    if value is None:
        return default
    try:
        return parse(value)
    except ValueError:
        shown = value.lower() if kind == "boolean" else value  # SGLang's EnvBool quotes the lowered value
        warnings.warn(
            f'Invalid value for {name}: "{shown}" is not a valid {kind} value, using default "{default}"', stacklevel=3
        )
        return default


def env_int(name: str, default: int) -> int:
    """SGLang's ``EnvInt(default).get()``."""
    return _get(name, default, int, "integer")


def _bool(value: str) -> bool:
    low = value.lower()
    if low in ("true", "1", "yes", "y"):
        return True
    if low in ("false", "0", "no", "n"):
        return False
    raise ValueError(value)


def env_bool(name: str, default: bool) -> bool:
    """SGLang's ``EnvBool(default).get()``."""
    return _get(name, default, _bool, "boolean")


def env_float(name: str, default: float) -> float:
    """SGLang's ``EnvFloat(default).get()``."""
    return _get(name, default, float, "float")
