#!/usr/bin/env bash
# List anything a pd-chaos run left behind and fail if there is any: engine, router,
# Toxiproxy or bridge processes (a bridge holds its stack's network namespace, and with it
# every packet rule and qdisc), network namespaces other than the host's that hold a
# pd-chaos process, named ones called pdchaos*, packet rules or shaping in the host's own
# tables (pd-chaos never puts any there), Compose containers of pdchaos-* projects,
# networks, dangling images, and SGLang's /dev/shm files that no process maps, made since
# PDCHAOS_LEFTOVERS_SINCE (epoch seconds; .ci/run sets it when it starts).
set -uo pipefail
found=0
procs=$(pgrep -af 'toxiproxy-server|python -m pdsim|smg::router|smg launch|smg.launch_router|sglang.launch_server|sglang::|chaos.system.bridge|chaos.system.queue_handler' | grep -v 'pgrep\|<defunct>' || true)
if [ -n "$procs" ]; then echo "leftover processes:"; echo "$procs"; found=1; fi
if command -v ip >/dev/null 2>&1; then
  named=$(ip netns list 2>/dev/null | grep pdchaos || true)
  if [ -n "$named" ]; then echo "leftover network namespaces:"; echo "$named"; found=1; fi
fi
host_rules=$( { command -v iptables >/dev/null 2>&1 && iptables -S 2>/dev/null | grep -i pdchaos; command -v tc >/dev/null 2>&1 && tc qdisc show dev lo | grep htb; } || true)
if [ -n "$host_rules" ]; then echo "packet rules or shaping in the host's own tables:"; echo "$host_rules"; found=1; fi
if command -v docker >/dev/null 2>&1 && timeout 10 docker info >/dev/null 2>&1; then
  containers=$(docker ps -a --format '{{.Names}} {{.Label "com.docker.compose.project"}} {{.Status}}' | awk '$2 ~ /^pdchaos/' || true)
  if [ -n "$containers" ]; then echo "leftover containers:"; echo "$containers"; found=1; fi
  networks=$(docker network ls --format '{{.Name}}' | grep pdchaos || true)
  if [ -n "$networks" ]; then echo "leftover networks:"; echo "$networks"; found=1; fi
  dangling=$(docker images -q --filter dangling=true --filter label=org.pdchaos.image || true)
  if [ -n "$dangling" ]; then echo "leftover dangling images: $dangling"; found=1; fi
fi
if [ -n "${PDCHAOS_LEFTOVERS_SINCE:-}" ] && [ -x .venv/bin/python ]; then
  shm=$(.venv/bin/python -c 'import sys; from chaos.system.shm import orphans; print(*orphans(float(sys.argv[1])), sep="\n")' "$PDCHAOS_LEFTOVERS_SINCE")
  if [ -n "$shm" ]; then echo "leftover shared-memory files:"; echo "$shm"; found=1; fi
fi
[ "$found" -eq 0 ] && echo "leftovers: none"
exit "$found"
