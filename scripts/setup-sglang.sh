#!/usr/bin/env bash
# Set up the sglang-cpu target: real SGLang prefill/decode engines on CPU.
#   .tools/sglang/venv   lean SGLang venv (torch, sglang --no-deps + its CPU requirement list,
#                        torchvision, Mooncake's non-CUDA wheel); kept apart from .venv
#   .tools/sglang/root   Debian's libibverbs1 and libnl (Mooncake's engine.so links them even
#                        for TCP), unpacked here rather than installed system-wide
#   .tools/sglang/model  a tiny random Qwen2 with a locally trained tokenizer (fixed seed)
# Idempotent: a second run only checks. Needs about 8 GB of disk and 2 minutes on a fresh machine.
set -euo pipefail
cd "$(dirname "$0")/.."
SGLANG_VERSION=0.5.23
TORCH_VERSION=2.14.1
TORCHVISION_VERSION=0.29.1
MOONCAKE_VERSION=0.3.13.post1
UV_VERSION=0.13.9  # installs the venv (into the project's .venv, beside pdchaos)
NEED_GB=10
T="$PWD/.tools/sglang"
mkdir -p "$T"

stamp="$T/.venv-ready"
want="sglang=$SGLANG_VERSION torch=$TORCH_VERSION tv=$TORCHVISION_VERSION mooncake=$MOONCAKE_VERSION $(sha1sum sglang_cpu/requirements.txt | cut -c1-12)"
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  free_gb=$(df -Pk "$T" | awk 'NR==2 {print int($4 / 1048576)}')
  if [ "$free_gb" -lt "$NEED_GB" ]; then
    echo "setup-sglang: ${free_gb} GB free under $T; the SGLang venv needs about ${NEED_GB} GB" >&2
    exit 1
  fi
  rm -rf "$T/venv"
  python3 -m venv "$T/venv"
  log="$T/pip-install.log"
  echo "setup-sglang: installing torch $TORCH_VERSION, sglang $SGLANG_VERSION (CPU) into $T/venv (log: $log)"
  # uv, not pip: the same wheels from PyPI, fetched in parallel and linked from a cache kept
  # under .tools, bytecode compiled as pip does (the engines import it at every start, and the
  # compose engines read the venv through a mount): 89 s on this machine, pip 23.2 took 223 s
  [ -x .venv/bin/uv ] || .venv/bin/pip install -q "uv==$UV_VERSION"
  uv_install() { UV_CACHE_DIR="$T/uv-cache" .venv/bin/uv pip install --compile-bytecode --python "$T/venv/bin/python" "$@"; }
  {
    uv_install "torch==$TORCH_VERSION" "torchvision==$TORCHVISION_VERSION" \
    && uv_install --no-deps "sglang==$SGLANG_VERSION" \
    && uv_install -r sglang_cpu/requirements.txt "mooncake-transfer-engine-non-cuda==$MOONCAKE_VERSION"
  } >"$log" 2>&1 || { tail -n 40 "$log" >&2; exit 1; }
  echo "$want" >"$stamp"
fi

# The engines run in a network namespace of the stack's own, whose links are broken with
# packet rules (chaos.system.netns): nsenter (util-linux), ip and tc (iproute2), iptables; and
# delayed and corrupted by the queue handler (chaos.system.queue_handler), whose binding is built against
# libnetfilter-queue (its headers, and a C compiler).
if [ "$(id -u)" = 0 ]; then
  need=()
  command -v iptables >/dev/null 2>&1 || need+=(iptables)
  command -v tc >/dev/null 2>&1 || need+=(iproute2)
  command -v cc >/dev/null 2>&1 || need+=(gcc libc6-dev)
  [ -e /usr/include/libnetfilter_queue/libnetfilter_queue.h ] || need+=(libnetfilter-queue-dev)
  if [ "${#need[@]}" -gt 0 ]; then
    export DEBIAN_FRONTEND=noninteractive
    { apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null 2>&1 \
      || { apt-get update -qq && apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null; }; } \
      || echo "setup-sglang: could not install ${need[*]}: the sglang-cpu target will lack some of its link faults" >&2
  fi
  .venv/bin/python -c "import netfilterqueue" 2>/dev/null \
    || .venv/bin/pip install -q -e '.[packets]' \
    || echo "setup-sglang: could not install the packets extra: the sglang-cpu target will lack link_corrupt" >&2
fi

# Mooncake's engine.so needs libibverbs.so.1 (and libnl) at load time, even over TCP.
if [ ! -e "$T/root/.ready" ]; then
  export DEBIAN_FRONTEND=noninteractive
  mkdir -p "$T/debs" "$T/root"
  (cd "$T/debs" && { apt-get download libibverbs1 libnl-3-200 libnl-route-3-200 >/dev/null 2>&1 \
      || { apt-get update -qq && apt-get download libibverbs1 libnl-3-200 libnl-route-3-200 >/dev/null; }; })
  for deb in "$T"/debs/*.deb; do dpkg-deb -x "$deb" "$T/root"; done
  touch "$T/root/.ready"
fi

if [ ! -e "$T/model/.ready" ] || [ sglang_cpu/tiny_model.py -nt "$T/model/.ready" ]; then
  rm -rf "$T/model"
  "$T/venv/bin/python" sglang_cpu/tiny_model.py "$T/model"
  touch "$T/model/.ready"
fi

# The check: every piece imports as the engines will import it.
env PYTHONPATH="$PWD/sglang_cpu/shim" LD_LIBRARY_PATH="$T/root/usr/lib/x86_64-linux-gnu:$T/root/lib/x86_64-linux-gnu" SGLANG_USE_CPU_ENGINE=1 \
  "$T/venv/bin/python" -c "import sglang.srt.entrypoints.http_server, mooncake.engine, sgl_kernel" \
  || { echo "setup-sglang: the SGLang venv does not import; remove $T and run again" >&2; exit 1; }
echo "setup-sglang: ok (sglang $SGLANG_VERSION, torch $TORCH_VERSION, model $T/model, $(du -sh "$T" | cut -f1))"
