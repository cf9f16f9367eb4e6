#!/usr/bin/env bash
# The project's own checks, run first by `make test` (and so by CI): ruff's lint and format
# (120 columns) on every Python tree, and mypy on the product, its tests, suites and benchmarks, both configured in
# pyproject.toml.
set -euo pipefail
cd "$(dirname "$0")/.."
.venv/bin/ruff check chaos pdsim tests suites bench sglang_cpu scripts
.venv/bin/ruff format --check --quiet chaos pdsim tests suites bench sglang_cpu scripts || { echo "check: run .venv/bin/ruff format chaos pdsim tests suites bench sglang_cpu scripts" >&2; exit 1; }
.venv/bin/mypy
echo "check: ok (ruff, ruff format, mypy)"
