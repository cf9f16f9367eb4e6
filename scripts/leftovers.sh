#!/usr/bin/env bash
# List anything a pd-chaos run left behind and fail if there is any: engine, router or
# Toxiproxy processes, Compose containers of pdchaos-* projects, networks, dangling images,
# and SGLang's /dev/shm files that no process maps, made since PDCHAOS_LEFTOVERS_SINCE
# (epoch seconds; .ci/run sets it when it starts).
set -uo pipefail
found=0
procs=$(pgrep -af 'toxiproxy-server|python -m pdsim|smg::router|smg launch|smg.launch_router|sglang.launch_server|sglang::' | grep -v 'pgrep\|<defunct>' || true)
if [ -n "$procs" ]; then echo "leftover processes:"; echo "$procs"; found=1; fi
if command -v docker >/dev/null 2>&1 && timeout 10 docker info >/dev/null 2>&1; then
  containers=$(docker ps -a --format '{{.Names}} {{.Label "com.docker.compose.project"}} {{.Status}}' | awk '$2 ~ /^pdchaos/' || true)
  if [ -n "$containers" ]; then echo "leftover containers:"; echo "$containers"; found=1; fi
  networks=$(docker network ls --format '{{.Name}}' | grep pdchaos || true)
  if [ -n "$networks" ]; then echo "leftover networks:"; echo "$networks"; found=1; fi
  dangling=$(docker images -q --filter dangling=true --filter label=org.pdchaos.image || true)
  if [ -n "$dangling" ]; then echo "leftover dangling images: $dangling"; found=1; fi
fi
if [ -n "${PDCHAOS_LEFTOVERS_SINCE:-}" ] && [ -x .venv/bin/python ]; then
  shm=$(.venv/bin/python -c 'import sys; from chaos.shm import orphans; print(*orphans(float(sys.argv[1])), sep="\n")' "$PDCHAOS_LEFTOVERS_SINCE")
  if [ -n "$shm" ]; then echo "leftover shared-memory files:"; echo "$shm"; found=1; fi
fi
[ "$found" -eq 0 ] && echo "leftovers: none"
exit "$found"
