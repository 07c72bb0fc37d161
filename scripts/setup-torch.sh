#!/usr/bin/env bash
# Installs what the training tests need, from PyPI alone, cached outside the repository:
#   $CACHE/libtorch-2.13.0: a CPU-usable libtorch 2.13.0 for tch 0.26 (about 540 MB, ~20 s cold)
#   $CACHE/venv-torch-2.13.0: a Python venv with torch 2.13.0 for DDP/torchrun (4.7 GB, ~2 min cold)
# CACHE is $RANKVISOR_CACHE, else /var/cache/rankvisor. A second run finds both and takes < 1 s.
# Progress goes to stderr; stdout is only `export` lines for the caller to eval:
#   eval "$(bash scripts/setup-torch.sh)"
set -euo pipefail
TORCH_VERSION=2.13.0
CACHE=${RANKVISOR_CACHE:-/var/cache/rankvisor}
LIBTORCH_DIR=$CACHE/libtorch-$TORCH_VERSION
VENV_DIR=$CACHE/venv-torch-$TORCH_VERSION
PYTHON=${PYTHON:-python3}
mkdir -p "$CACHE"
log() { echo "scripts/setup-torch.sh: $*" >&2; }

# No CPU-only torch 2.13 wheel exists on PyPI and Debian's libtorch is 1.13, so libtorch comes out of
# the CUDA wheel: only the CPU libraries, plus the two CUDA runtime libraries libtorch_cpu.so links
# (found through its own RPATH $ORIGIN/../../nvidia/cu13/lib, so the wheel's layout is kept).
install_libtorch() {
  if [ "$(cat "$LIBTORCH_DIR/torch/build-version" 2>/dev/null)" = "$TORCH_VERSION" ]; then
    log "libtorch $TORCH_VERSION cached in $LIBTORCH_DIR"; return
  fi
  local t0=$SECONDS tmp
  tmp=$(mktemp -d)
  log "downloading libtorch $TORCH_VERSION (CPU use) into $LIBTORCH_DIR"
  # The older manylinux tags are needed: without them pip finds no nvidia-cuda-runtime.
  "$PYTHON" -m pip download --quiet --no-deps --only-binary=:all: \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_25_x86_64 --platform manylinux_2_17_x86_64 \
    --python-version 3.11 --implementation cp \
    -d "$tmp" "torch==$TORCH_VERSION" nvidia-cuda-runtime==13.0.96 nvidia-cuda-cupti==13.0.85 >&2
  rm -rf "$LIBTORCH_DIR.partial"; mkdir -p "$LIBTORCH_DIR.partial"
  unzip -q "$tmp"/torch-"$TORCH_VERSION"-*.whl 'torch/include/*' \
    torch/lib/libtorch_cpu.so torch/lib/libc10.so torch/lib/libtorch.so torch/lib/libgomp.so.1 \
    -d "$LIBTORCH_DIR.partial"
  unzip -q "$tmp"/nvidia_cuda_runtime-*.whl nvidia/cu13/lib/libcudart.so.13 -d "$LIBTORCH_DIR.partial"
  unzip -q "$tmp"/nvidia_cuda_cupti-*.whl nvidia/cu13/lib/libcupti.so.13 -d "$LIBTORCH_DIR.partial"
  echo "$TORCH_VERSION" > "$LIBTORCH_DIR.partial/torch/build-version"
  rm -rf "$LIBTORCH_DIR" "$tmp"; mv "$LIBTORCH_DIR.partial" "$LIBTORCH_DIR"
  log "libtorch: $((SECONDS - t0)) s, $(du -sh "$LIBTORCH_DIR" | cut -f1)"
}

# The full CUDA wheel set is pulled on purpose: without it `import torch` fails on libcudnn.
install_venv() {
  if [ -f "$VENV_DIR/.complete" ] && [ -x "$VENV_DIR/bin/python" ]; then
    log "torch $TORCH_VERSION venv cached in $VENV_DIR"; return
  fi
  local t0=$SECONDS
  log "creating a venv with torch $TORCH_VERSION in $VENV_DIR (about 2.7 GB download)"
  # A venv's scripts embed its path, so it is built in place; `.complete` marks a finished one.
  rm -rf "$VENV_DIR"
  "$PYTHON" -m venv "$VENV_DIR"
  "$VENV_DIR/bin/python" -m pip install --quiet --no-cache-dir "torch==$TORCH_VERSION" >&2
  "$VENV_DIR/bin/python" -W ignore -c "import torch.distributed as d; assert d.is_gloo_available()" >&2
  touch "$VENV_DIR/.complete"
  log "venv: $((SECONDS - t0)) s, $(du -sh "$VENV_DIR" | cut -f1)"
}

install_libtorch
install_venv
echo "export LIBTORCH=$LIBTORCH_DIR/torch"
echo "export RANKVISOR_TORCH_VENV=$VENV_DIR"
