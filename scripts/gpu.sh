#!/usr/bin/env bash
# The GPU path's steps (docs/gpu.md), each a make target:
#   scripts/gpu.sh pull     the images of the GPU stack (tens of GB, once per release), and their digests
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
image=${SGLANG_IMAGE:-lmsysorg/sglang:v0.5.23-cu129}

case "${1:-}" in
  pull)
    docker compose "${overlays[@]}" pull
    for ref in "$image" "${SMG_IMAGE:-lightseekorg/smg:1.13.0}" "${TOXIPROXY_IMAGE:-ghcr.io/shopify/toxiproxy:2.12.0}"; do
      echo "$ref = $(docker image inspect --format '{{join .RepoDigests ", "}}' "$ref")"
    done
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
