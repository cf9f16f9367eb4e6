"""Finding the external programs the embedded stack runs: Toxiproxy's server and smg."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from chaos.errors import ConfigError

__all__ = ["REPO_ROOT", "smg_binary", "toxiproxy_binary"]

REPO_ROOT = Path(__file__).resolve().parents[2]  # chaos/system/tools.py
TOOLS_BIN = REPO_ROOT / ".tools" / "bin"


def toxiproxy_binary() -> str:
    """``TOXIPROXY_SERVER``, then ``toxiproxy-server`` on PATH, then ``.tools/bin``."""
    env = os.environ.get("TOXIPROXY_SERVER")
    if env:
        if not os.access(env, os.X_OK):
            raise ConfigError(f"TOXIPROXY_SERVER={env} is not an executable file")
        return env
    found = shutil.which("toxiproxy-server") or shutil.which("toxiproxy-server", path=str(TOOLS_BIN))
    if found:
        return found
    raise ConfigError(
        "Toxiproxy server not found: set TOXIPROXY_SERVER, put toxiproxy-server on PATH, or run "
        "`scripts/setup.sh` (it runs `go install github.com/Shopify/toxiproxy/v2/cmd/server@v2.12.0` "
        "into .tools/bin)"
    )


def smg_binary() -> str:
    """smg from the running interpreter's environment first, then PATH."""
    beside = Path(sys.executable).parent / "smg"
    if beside.exists():
        return str(beside)
    found = shutil.which("smg")
    if found:
        return found
    raise ConfigError("smg not found: `pip install smg==1.13.0` (scripts/setup.sh does it)")
