#!/usr/bin/env bash
# Set up what the compose targets need on a fresh Debian machine with no registry but Debian's
# and PyPI: the Docker engine (docker.io), started with no bridge so that no private-range
# address exists (every container uses host networking); the Compose v2 plugin (Debian
# trixie's docker-compose .deb, unpacked without touching /etc/apt); and the offline base
# image pybase:ci (mmdebstrap essential | docker import). Then builds the CPU images
# (compose/build.sh). Idempotent: a second run only checks. Recipe: ../shared/reference/infra.md.
set -euo pipefail
cd "$(dirname "$0")/.."
export DEBIAN_FRONTEND=noninteractive
STATE="$PWD/.tools/docker"
mkdir -p "$STATE"
DEBIAN_MIRROR="${DEBIAN_MIRROR:-$(sed -n 's/^URIs: *//p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -1)}"
DEBIAN_MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"

if ! command -v dockerd >/dev/null 2>&1 || ! command -v mmdebstrap >/dev/null 2>&1; then
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends docker.io mmdebstrap >"$STATE/apt.log" 2>&1 \
    || { tail -n 30 "$STATE/apt.log" >&2; exit 1; }
fi

if ! timeout 10 docker info >/dev/null 2>&1; then
  # No bridge, no iptables: only the host and none networks exist.
  nohup dockerd --bridge=none --iptables=false >"$STATE/dockerd.log" 2>&1 &
  echo $! >"$STATE/dockerd.pid"
  for _ in $(seq 1 120); do timeout 5 docker info >/dev/null 2>&1 && break; sleep 0.5; done
  timeout 10 docker info >/dev/null 2>&1 || { tail -n 50 "$STATE/dockerd.log" >&2; exit 1; }
fi

if ! timeout 10 docker compose version >/dev/null 2>&1; then
  A="$STATE/apt-trixie"
  mkdir -p "$A/lists/partial" "$A/archives/partial"
  echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $DEBIAN_MIRROR trixie main" >"$A/sources.list"
  AO=(-o "Dir::Etc::sourcelist=$A/sources.list" -o Dir::Etc::sourceparts=- -o "Dir::State::lists=$A/lists"
      -o "Dir::Cache::archives=$A/archives" -o APT::Sandbox::User=root)
  apt-get "${AO[@]}" update -qq
  (cd "$A" && apt-get "${AO[@]}" download docker-compose >/dev/null)
  mkdir -p /usr/libexec/docker/cli-plugins
  dpkg-deb --fsys-tarfile "$A"/docker-compose_*.deb | tar -x -C / ./usr/libexec/docker/cli-plugins/docker-compose
  timeout 10 docker compose version >/dev/null
fi

if ! timeout 10 docker image inspect pybase:ci >/dev/null 2>&1; then
  mmdebstrap --quiet --variant=essential --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr \
    --include=python3,python3-venv \
    --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*' \
    --dpkgopt='path-exclude=/usr/share/info/*' --dpkgopt='path-exclude=/usr/share/locale/*' \
    bookworm - "$DEBIAN_MIRROR" 2>"$STATE/mmdebstrap.log" \
  | docker import -c 'ENV LANG=C.UTF-8' -c 'LABEL org.pdchaos.image=base' -c 'CMD ["/bin/bash"]' - pybase:ci >/dev/null
fi

compose/build.sh
if [ -e .tools/sglang/model/.ready ]; then   # the compose-sglang-cpu target's engine image, once make setup-sglang ran
  compose/build-sglang.sh
fi
echo "docker-setup: ok ($(docker version --format 'engine {{.Server.Version}}'), $(docker compose version --short 2>/dev/null | sed 's/^/compose /'))"
