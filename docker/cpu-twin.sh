#!/usr/bin/env bash
# Builds the image's CPU twin: the repository's Dockerfile on the stand-in base of
# docker/cpu-base.sh, with ACCELERATOR=cpu (DeepSpeed's CPU ops built, apex and the fused
# kernels left out). Layers are cached: after a code edit only the last ones rebuild.
#
#   docker/cpu-twin.sh [IMAGE]       default localhost/zerolab:cpu; prints the image's name last
#
# ZEROLAB_ENGINE_SRC: a local git directory holding the engine's pinned commit (bare or checked
# out) to fetch Megatron-DeepSpeed from instead of GitHub; podman mounts it into the build
# (docker's build cannot, so docker fetches from GitHub). CONTAINER_TOOL: podman (the default
# where installed) or docker. Why each flag: README.md, "The image on CPU".
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
image="${1:-localhost/zerolab:cpu}"
tool="${CONTAINER_TOOL:-$(command -v podman > /dev/null && echo podman || echo docker)}"

base="$("$root/docker/cpu-base.sh")"
args=(build --file "$root/Dockerfile" --tag "$image" --build-arg "BASE_IMAGE=$base" --build-arg ACCELERATOR=cpu
    --build-arg "MAX_JOBS=$(nproc)")
if [[ "$tool" == podman ]]; then
    # --format docker: OCI images have no SHELL, and podman would drop the Dockerfile's pipefail.
    args+=(--format docker --layers)
    # crun refuses a mixed cgroup v1/v2 layout that runc accepts; a sandboxed root may not raise
    # its limits to podman's defaults.
    if command -v runc > /dev/null; then args+=(--runtime runc); fi
    args+=(--ulimit nofile=20000:20000 --ulimit nproc=32768:32768)
    # The host's certificates, for pip's TLS behind a proxy that signs with its own.
    ca="${SSL_CERT_FILE:-/etc/ssl/certs/ca-certificates.crt}"
    if [[ -f "$ca" ]]; then args+=(--volume "$ca:/etc/ssl/certs/ca-certificates.crt:ro"); fi
    if [[ -n "${ZEROLAB_ENGINE_SRC:-}" ]]; then
        args+=(--volume "$(cd "$ZEROLAB_ENGINE_SRC" && pwd):/mnt/engine-src:ro" --build-arg ENGINE_SRC=/mnt/engine-src)
    fi
elif [[ -n "${ZEROLAB_ENGINE_SRC:-}" ]]; then
    echo "docker/cpu-twin.sh: docker build cannot mount ZEROLAB_ENGINE_SRC; unset it (GitHub) or use podman" >&2
    exit 2
fi
"$tool" "${args[@]}" "$root" >&2
echo "$image"
