"""Run engine command lines through SGLang's own startup resolution, short of any device.

    python sglang_cpu/resolve.py '[["--model-path", "M", ...], ...]'

For each command line (the arguments after ``-m sglang.launch_server``), what
``launch_server`` does before it touches a device: ``prepare_server_args`` (the parser) and
``ServerArgs.resolve_once`` (every resolution hook: the PD checks, the IB device check, the
transfer backend's rewrite, the model's config). Prints one JSON list: per command line
``{"raw": {...}, "resolved": {...}}`` (the parsed fields, and the resolved ones), or
``{"exit": code, "stderr": ...}`` when the parser refused it, or ``{"error": "Type: message"}``
when resolution raised. Each line gets a fresh interpreter state for what resolution writes
to ``os.environ`` (``mooncake_tcp`` sets ``MC_FORCE_TCP``): ``{"environ": {...}}`` lists what
it added. Runs under the SGLang venv's interpreter (``.tools/sglang/venv``), with the CPU
engine's environment (``sglang_cpu/launch.py``), and imports nothing of pd-chaos.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
from typing import Any


def _plain(value: Any) -> Any:
    """A JSON-able copy: what SGLang keeps as enums, paths or records, as strings."""
    try:
        json.dumps(value)
        return value
    except TypeError:
        return repr(value)


def resolve(argv: list[str]) -> dict[str, Any]:
    from sglang.srt.arg_groups.arg_utils import record_fields
    from sglang.srt.server_args import prepare_server_args

    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            args = prepare_server_args(argv)
    except SystemExit as exc:
        return {"exit": exc.code, "stderr": err.getvalue()[-800:]}
    raw = {f.name: _plain(getattr(args, f.name)) for f in record_fields(type(args))}
    before = dict(os.environ)
    try:
        args.resolve_once()
    except Exception as exc:  # what SGLang raises is the finding: report it, whatever its type
        return {"raw": raw, "error": f"{type(exc).__name__}: {exc}"}
    finally:
        added = {k: v for k, v in os.environ.items() if before.get(k) != v}
        os.environ.clear()
        os.environ.update(before)
    resolved = {k: _plain(v) for k, v in args.resolved_dict().items()}
    return {"raw": raw, "resolved": resolved, "environ": added}


def main() -> None:
    from sglang.srt.plugins import load_plugins

    load_plugins()  # as launch_server does before it parses
    print(json.dumps([resolve(list(argv)) for argv in json.loads(sys.argv[1])]))


if __name__ == "__main__":
    main()
