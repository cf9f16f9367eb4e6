#!/usr/bin/env bash
# Build the engine image of compose/sglang-cpu.yaml offline: Debian's Python and the shared
# libraries that torch and Mooncake's engine.so load (libstdc++, libgomp, libnuma, libcurl,
# libibverbs, libnl), straight from Debian with mmdebstrap into `docker import`. SGLang itself
# is not in the image: the overlay mounts the host's .tools/sglang (make setup-sglang)
# read-only, 7 GB that an image would only copy. Idempotent: an existing image is kept.
set -euo pipefail
cd "$(dirname "$0")/.."
IMAGE="${PDCHAOS_SGLANG_IMAGE:-pdchaos-sglang:ci}"
DEBIAN_MIRROR="${DEBIAN_MIRROR:-$(sed -n 's/^URIs: *//p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -1)}"
DEBIAN_MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
if timeout 10 docker image inspect "$IMAGE" >/dev/null 2>&1; then
  exit 0
fi
log=$(mktemp)
trap 'rm -f "$log"' EXIT
mmdebstrap --quiet --variant=essential --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr \
  --include=python3,libstdc++6,libgomp1,libnuma1,libcurl4,libibverbs1,libnl-route-3-200 \
  --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*' \
  --dpkgopt='path-exclude=/usr/share/info/*' --dpkgopt='path-exclude=/usr/share/locale/*' \
  bookworm - "$DEBIAN_MIRROR" 2>"$log" \
| docker import -c 'ENV LANG=C.UTF-8' -c 'LABEL org.pdchaos.image=sglang-base' - "$IMAGE" >/dev/null \
  || { cat "$log" >&2; exit 1; }
echo "build: $IMAGE"
