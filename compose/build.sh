#!/usr/bin/env bash
# Build the CPU compose image offline: wheels from PyPI (cp311 manylinux) and the local
# Toxiproxy server go into a temporary context with pdsim's source; `docker build
# --network none` on BASE (default pybase:ci, made by scripts/docker-setup.sh) never
# reaches a registry. Rebuilds only when pdsim, the requirements or the Dockerfile changed.
set -euo pipefail
cd "$(dirname "$0")/.."
IMAGE="${PDCHAOS_CPU_IMAGE:-pdchaos-cpu:ci}"
BASE="${PDCHAOS_BASE_IMAGE:-pybase:ci}"
TOXIPROXY="${TOXIPROXY_SERVER:-.tools/bin/toxiproxy-server}"
[ -x "$TOXIPROXY" ] || { echo "build: $TOXIPROXY missing (run scripts/setup.sh)" >&2; exit 1; }

stamp=$(cat compose/cpu.Dockerfile compose/cpu-requirements.txt "$TOXIPROXY" $(git ls-files pdsim 2>/dev/null || find pdsim -name '*.py') | sha256sum | cut -c1-16)
if [ "$(docker image inspect -f '{{index .Config.Labels "org.pdchaos.stamp"}}' "$IMAGE" 2>/dev/null)" = "$stamp" ]; then
  exit 0
fi
ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT
mkdir -p "$ctx/wheels"
grep -v '^#' compose/cpu-requirements.txt >"$ctx/wheels/requirements.txt"
python3 -m pip download -q --disable-pip-version-check --only-binary=:all: --python-version 3.11 --implementation cp \
  --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 \
  -d "$ctx/wheels" -r "$ctx/wheels/requirements.txt" 2> >(grep -v "is ignored" >&2)
cp "$TOXIPROXY" "$ctx/toxiproxy-server"
cp -r pdsim "$ctx/pdsim"
find "$ctx/pdsim" -name __pycache__ -prune -exec rm -rf {} +
docker build -q --network none --build-arg "BASE=$BASE" --label "org.pdchaos.stamp=$stamp" \
  -f compose/cpu.Dockerfile -t "$IMAGE" "$ctx" >/dev/null 2>"$ctx/build.err" \
  || { cat "$ctx/build.err" >&2; exit 1; }
docker image prune -f --filter label=org.pdchaos.image=cpu >/dev/null   # the image this one replaced
echo "build: $IMAGE ($stamp)"
