#!/usr/bin/env bash
# The CUDA build, proven without a GPU (run by hand: far too slow for CI). On a machine with
# network access to the package index and no GPU, it makes an engine environment with the
# pinned torch as pip's CUDA build and NVIDIA's nvcc from pip, then runs zerolab's own build
# steps: `zerolab engine install` with no GPU and no TORCH_CUDA_ARCH_LIST (it must say what it
# skipped and why), then again with TORCH_CUDA_ARCH_LIST (apex's three extensions, Megatron's
# fused kernels and the data helpers, built as `make setup` and the Dockerfile build them), and
# imports what was built. Results: benchmarks/cuda-build.md.
#
#   benchmarks/cuda_build.sh            # ZEROLAB_HOME defaults to ~/.cache/zerolab-cuda-build
#
# Environment: ZEROLAB_HOME (kept apart from the CPU engine's), TORCH_CUDA_ARCH_LIST (default
# 9.0), MAX_JOBS, and ZEROLAB_ENGINE_SRC / ZEROLAB_APEX_SRC (local git directories) where
# GitHub cannot be reached.
set -euo pipefail
cd "$(dirname "$0")/.."

export ZEROLAB_HOME="${ZEROLAB_HOME:-$HOME/.cache/zerolab-cuda-build}"
arch="${TORCH_CUDA_ARCH_LIST:-9.0}"
unset TORCH_CUDA_ARCH_LIST CUDA_HOME
python="$ZEROLAB_HOME/venv/bin/python"
torch_pin="$(.venv/bin/python -c 'from zerolab.engine.pins import load_pins; print(load_pins().python["torch"])')"
logs="$ZEROLAB_HOME/logs"
mkdir -p "$logs"

step() {  # step NAME COMMAND...: run, log and time one step
  local name="$1" started
  shift
  started=$(date +%s)
  echo "== $name: $*"
  if "$@" >"$logs/$name.log" 2>&1; then
    echo "   ok in $(($(date +%s) - started)) s (log: $logs/$name.log)"
  else
    echo "   FAILED after $(($(date +%s) - started)) s; the end of $logs/$name.log:"
    tail -20 "$logs/$name.log"
    exit 1
  fi
}

[[ -x "$python" ]] || step venv python3 -m venv "$ZEROLAB_HOME/venv"
# --isolated: the registry's CUDA build, even where pip's configuration points at a folder
# holding a CPU wheel of the same version (which pip would prefer).
# nvcc and its headers come with the cuda-toolkit version torch itself requires.
step cuda-torch "$python" -m pip --isolated install "torch==$torch_pin" "cuda-toolkit[nvcc,cccl]"
"$python" -c 'import torch; assert torch.version.cuda, torch.__version__; print("torch", torch.__version__)'

# With no GPU and no architectures named, the CUDA builds are skipped, and said to be.
step install-no-arch .venv/bin/zerolab engine install
grep -E "^(5|7|8)/9" "$logs/install-no-arch.log"

# With TORCH_CUDA_ARCH_LIST: apex, the helpers and the fused kernels, built for it.
rm -f "$ZEROLAB_HOME/install.json"
step install-arch env TORCH_CUDA_ARCH_LIST="$arch" .venv/bin/zerolab engine install
grep -E "^(5|6|7|8)/9|CUDA toolkit from pip|apex: built|fused kernels:" "$logs/install-arch.log" || true

step imports "$python" -c '
import importlib, torch
for name in ("amp_C", "fused_layer_norm_cuda", "fused_weight_gradient_mlp_cuda", "apex"):
    importlib.import_module(name)
print("apex modules import; torch", torch.__version__, "CUDA", torch.version.cuda)
'
ls -l "$ZEROLAB_HOME"/engine/*/megatron/fused_kernels/build/*.so
