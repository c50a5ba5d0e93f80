#!/usr/bin/env bash
# The stand-in base of the image's CPU twin, for anyone without NVIDIA's registry: a Debian 12
# root filesystem made from Debian's packages (mmdebstrap, as root) with what the Dockerfile's
# steps need of NGC's image (a compiler, git, Python 3.11 with its headers and pip) and torch,
# the CPU build, at pins.toml's version, its dependencies at requirements/engine.txt's. No
# container registry is asked. Imported as an image by podman (or docker) and printed: pass it
# to the Dockerfile as BASE_IMAGE with ACCELERATOR=cpu (README.md, tests/container/).
#
#   docker/cpu-base.sh            make the base unless an image of these inputs exists; print its name
#
# The inputs are pinned: Debian's release (bookworm) and the packages below, torch's version
# (pins.toml), the sha256 of its wheel (TORCH_SHA256; empty accepts whatever pip serves for
# the version) and its dependencies' versions (the lock). The image's tag is a digest of
# them. Settings: DEBIAN_MIRROR (default http://deb.debian.org/debian, or a snapshot such
# as http://snapshot.debian.org/archive/debian/20250520T000000Z), CONTAINER_TOOL (podman,
# else docker), PIP (the pip that downloads torch, default python3 -m pip: its indexes).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

suite=bookworm
packages=build-essential,ca-certificates,git,python3-dev,python3-pip
mirror="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
torch_version="$(sed -n 's/^torch = "\(.*\)"$/\1/p' "$root/zerolab/engine/pins.toml")"
# The CPU build of torch 2.13.0 for CPython 3.11 on x86_64 (torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl).
torch_sha256="${TORCH_SHA256-6746dbcbeb526eb61330b76b41ff1b4eb848951103a892eeb080dfa2b264667b}"
tool="${CONTAINER_TOOL:-$(command -v podman > /dev/null && echo podman || echo docker)}"
read -r -a pip <<< "${PIP:-python3 -m pip}"

# pip installs into the system Python, as in NGC's image: Debian's marker that reserves it for
# apt goes, and pip trusts the system's certificates (those a build mounts, e.g. a proxy's).
# shellcheck disable=SC2016 # "$1" is mmdebstrap's: the root filesystem, expanded by its hooks' shell
hooks=(
    --customize-hook='rm -f "$1"/usr/lib/python3*/EXTERNALLY-MANAGED'
    --customize-hook='printf "[global]\ncert = /etc/ssl/certs/ca-certificates.crt\n" > "$1/etc/pip.conf"'
    --customize-hook='chroot "$1" python3 -m pip install --quiet --no-index --find-links /tmp/wheels --no-cache-dir torch'
    --customize-hook='rm -rf "$1"/tmp/wheels "$1"/var/lib/apt/lists/*'
    --customize-hook='chroot "$1" dpkg-query -W > "$1/etc/zerolab-base-packages.txt"'
)
digest="$(echo "$suite $packages $torch_version $torch_sha256 ${hooks[*]}" | cat - "$root/requirements/engine.txt" |
    sha256sum | cut -c1-12)"
image="localhost/zerolab-cpu-base:${suite}-torch${torch_version}-${digest}"
if "$tool" image inspect "$image" > /dev/null 2>&1; then
    echo "$image"
    exit 0
fi
[[ $(id -u) -eq 0 ]] || { echo "docker/cpu-base.sh: mmdebstrap makes the root filesystem as root" >&2; exit 2; }
command -v mmdebstrap > /dev/null || { echo "docker/cpu-base.sh: needs mmdebstrap (apt-get install mmdebstrap)" >&2; exit 2; }

work="$(mktemp -d "${TMPDIR:-/var/tmp}/zerolab-cpu-base.XXXXXX")"
trap 'rm -rf "$work"' EXIT
mkdir "$work/wheels"
# torch for Debian 12's Python (3.11, glibc 2.36), with its dependencies at the lock's versions.
"${pip[@]}" download --quiet --only-binary :all: --python-version 3.11 --platform manylinux_2_28_x86_64 \
    -c "$root/requirements/engine.txt" -d "$work/wheels" "torch==${torch_version}" >&2
wheel="$(ls "$work/wheels"/torch-*.whl)"
if [[ -n "$torch_sha256" ]] && ! echo "$torch_sha256  $wheel" | sha256sum --check --quiet; then
    echo "docker/cpu-base.sh: $(basename "$wheel") is not the pinned build (sha256 $torch_sha256);" \
        "TORCH_SHA256=<its sha256> accepts it, TORCH_SHA256= any" >&2
    exit 2
fi

# The wheels go in first (copy-in, mmdebstrap's own hook); the digest leaves out their folder's name.
SOURCE_DATE_EPOCH=1747699200 mmdebstrap --quiet --variant=minbase --include="$packages" \
    --customize-hook="copy-in $work/wheels /tmp" "${hooks[@]}" "$suite" "$work/rootfs.tar" "deb $mirror $suite main" >&2
"$tool" import --change 'CMD ["/bin/bash"]' "$work/rootfs.tar" "$image" > /dev/null
echo "$image"
