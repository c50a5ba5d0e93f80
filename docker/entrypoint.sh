#!/usr/bin/env bash
# Entry point of the zerolab image. Runs its arguments: a recipe (`recipes/gpt2_z1.sh`),
# `zerolab ...`, or any command, from the repository root (/workspace/zerolab).
set -euo pipefail

# `docker run --user $(id -u)` starts a user the image does not know: no home directory.
# Python, Triton and DeepSpeed write caches under HOME, so give it a writable one.
if [[ -z "${HOME:-}" || "${HOME}" == "/" || ! -w "${HOME}" ]]; then
    HOME="/tmp/zerolab-home-$(id -u)"
    export HOME
    mkdir -p "${HOME}"
fi
export XDG_CACHE_HOME="${XDG_CACHE_HOME:-${HOME}/.cache}"
export TORCH_EXTENSIONS_DIR="${TORCH_EXTENSIONS_DIR:-${XDG_CACHE_HOME}/torch_extensions}"
export TRITON_CACHE_DIR="${TRITON_CACHE_DIR:-${XDG_CACHE_HOME}/triton}"

if [[ $# -eq 0 ]]; then
    set -- zerolab --help
fi

# NVIDIA's entry point checks the driver and sets up CUDA forward compatibility, then
# runs the command.
if [[ -x /opt/nvidia/nvidia_entrypoint.sh ]]; then
    exec /opt/nvidia/nvidia_entrypoint.sh "$@"
fi
exec "$@"
