#!/usr/bin/env bash
# Set up pd-chaos on a fresh machine: .venv with pdchaos (and smg from PyPI), and the real
# Toxiproxy server (Shopify's, v2.12.0) built with `go install` into .tools/bin, with
# actionlint beside it (the GPU job's workflow is checked by a test).
# Idempotent: a second run only checks.
set -euo pipefail
cd "$(dirname "$0")/.."
TOXIPROXY_VERSION=v2.12.0
ACTIONLINT_VERSION=v1.7.12  # checks the nightly GPU job's workflow (tests/targets/test_gpu_target.py)

if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
if ! .venv/bin/python -c "import chaos, pdsim, sglang_cpu.launch, pytest, smg" 2>/dev/null || [ pyproject.toml -nt .venv/.pdchaos-installed ]; then
  if ! .venv/bin/pip install -q -e '.[dev]' >.venv/pip-install.log 2>&1; then
    cat .venv/pip-install.log >&2
    exit 1
  fi
  .venv/bin/python -c "import chaos, pdsim, sglang_cpu.launch, pytest, smg"
  touch .venv/.pdchaos-installed
fi

if [ ! -x .tools/bin/toxiproxy-server ]; then
  if ! command -v go >/dev/null 2>&1; then
    echo "setup: Go is needed to build the Toxiproxy server (apt-get install golang-go, or see https://go.dev/dl/)" >&2
    exit 1
  fi
  mkdir -p .tools/bin
  GOBIN="$PWD/.tools/gobin" GOFLAGS=-mod=mod go install "github.com/Shopify/toxiproxy/v2/cmd/server@${TOXIPROXY_VERSION}"
  mv .tools/gobin/server .tools/bin/toxiproxy-server
  rmdir .tools/gobin
fi
.tools/bin/toxiproxy-server -version >/dev/null
if [ ! -x .tools/bin/actionlint ]; then
  GOBIN="$PWD/.tools/bin" go install "github.com/rhysd/actionlint/cmd/actionlint@${ACTIONLINT_VERSION}"
fi
echo "setup: ok ($(.tools/bin/toxiproxy-server -version 2>&1 | head -1), smg $(.venv/bin/python -c 'import importlib.metadata as m; print(m.version("smg"))'))"
