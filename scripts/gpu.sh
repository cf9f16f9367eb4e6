#!/usr/bin/env bash
# The GPU path's steps (docs/gpu.md), each a make target:
#   scripts/gpu.sh pull     the images of the GPU stack (tens of GB, once per release), pinned by digest
#                           in .pdchaos/gpu-images.env: later steps run exactly what was pulled
#   scripts/gpu.sh model    SGLANG_MODEL into HF_CACHE, with the engine image's own huggingface_hub (HF_TOKEN for gated models)
#   scripts/gpu.sh suites   `pdchaos gpu-check` (nothing starts unless the host can run the job), then the suites
# Knobs: PDCHAOS_TARGET (compose-gpu, or compose-gpu-rdma), PDCHAOS_GPUS, SGLANG_IMAGE, SGLANG_MODEL,
# HF_CACHE, PDCHAOS_RUN_ID (reports/<run id>/: junit.xml, summary.md, timelines, failed tests' engine logs).
set -euo pipefail
cd "$(dirname "$0")/.."
target=${PDCHAOS_TARGET:-compose-gpu}
case "$target" in
  compose-gpu) overlays=(-f compose/stack.yaml -f compose/gpu.yaml -f compose/gpu-tcp.yaml) ;;
  compose-gpu-rdma) overlays=(-f compose/stack.yaml -f compose/gpu.yaml -f compose/gpu-rdma.yaml) ;;
  *) echo "gpu.sh: PDCHAOS_TARGET=$target is not a GPU target (compose-gpu, compose-gpu-rdma)" >&2; exit 2 ;;
esac
hf_cache=${HF_CACHE:-$HOME/.cache/huggingface}
model=${SGLANG_MODEL:-Qwen/Qwen2.5-0.5B-Instruct}
pins=${PDCHAOS_GPU_PINS:-.pdchaos/gpu-images.env}  # (a test points it elsewhere)
vars=(SGLANG_IMAGE SMG_IMAGE TOXIPROXY_IMAGE)

ref_of() {  # the image a variable names now: the caller's, else the default (chaos/targets/gpuhost.py, as in the Compose files)
  local var=$1
  if [ -n "${!var:-}" ]; then echo "${!var}"; return; fi
  .venv/bin/python -c 'import sys; from chaos.targets.gpuhost import DEFAULT_IMAGES; print(DEFAULT_IMAGES[sys.argv[1]])' "$var"
}

# A pin applies while the variable still names the image it pinned (a new release or a
# caller's own image makes it stale, and it is left alone): VAR=name:tag@sha256:... runs
# exactly the bytes `pull` saw, with the tag kept for the reader (Docker ignores it then).
if [ -f "$pins" ]; then
  while IFS='=' read -r var pinned; do
    [ -n "$var" ] || continue
    if [ "$(ref_of "$var")" = "${pinned%@*}" ]; then export "$var=$pinned"; fi
  done <"$pins"
fi
image=$(ref_of SGLANG_IMAGE)

case "${1:-}" in
  pull)
    docker compose "${overlays[@]}" pull
    mkdir -p .pdchaos
    : >"$pins.new"
    for var in "${vars[@]}"; do
      ref=$(ref_of "$var")
      ref=${ref%@*}
      digest=$(docker image inspect --format '{{index .RepoDigests 0}}' "$ref")
      echo "$var=$ref@${digest#*@}" >>"$pins.new"
      echo "$ref = $digest"
    done
    mv "$pins.new" "$pins"
    echo "gpu.sh: pinned in $pins"
    ;;
  model)
    mkdir -p "$hf_cache"
    # host networking, as every container of the stack; the token only if the caller has one
    docker run --rm --network host -e HF_HOME=/hf ${HF_TOKEN:+-e HF_TOKEN} -v "$hf_cache:/hf" --entrypoint python3 "$image" \
      -c 'import sys, huggingface_hub as h; print(h.snapshot_download(sys.argv[1]))' "$model"
    ;;
  suites)
    shift
    .venv/bin/pdchaos gpu-check --target "$target"
    export PDCHAOS_RUN_ID=${PDCHAOS_RUN_ID:-gpu-$(date +%Y%m%d-%H%M%S)}
    echo "gpu.sh: reports in reports/$PDCHAOS_RUN_ID/"
    exec scripts/pytest.sh suites --target "$target" "$@"
    ;;
  *) echo "usage: scripts/gpu.sh pull|model|suites [pytest args]" >&2; exit 2 ;;
esac
