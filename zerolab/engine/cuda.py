"""What this machine gives the engine's CUDA builds, and whether they are needed: the GPUs and
their compute capabilities (nvidia-smi), the architectures to build for (TORCH_CUDA_ARCH_LIST),
the nvcc that torch's extension builder uses (its release, and the architectures it can build),
and from these one plan that `zerolab engine install` follows and `zerolab doctor` reports.

The rule: the CUDA builds (apex, the fused kernels) are needed when the engine's torch is a
CUDA build and there is something to build for: a GPU, or TORCH_CUDA_ARCH_LIST set (a machine
that builds for GPUs elsewhere). Standard library only: the engine's own Python uses it too.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

ARCH_LIST_VARIABLE = "TORCH_CUDA_ARCH_LIST"
"""Architectures to build for, as torch's extension builder reads them (`8.0;9.0`, `9.0+PTX`)."""

GPU_QUERY = ("nvidia-smi", "--query-gpu=name,compute_cap", "--format=csv,noheader")

_CAPABILITY = re.compile(r"^\d+\.\d+$")
_RELEASE = re.compile(r"release (\d+\.\d+)")


@dataclass(frozen=True)
class Gpu:
    """One GPU as nvidia-smi names it, and its compute capability (`9.0`)."""

    name: str
    capability: str


def parse_gpus(text: str) -> list[Gpu]:
    """The GPUs in `nvidia-smi --query-gpu=name,compute_cap --format=csv,noheader` output."""
    gpus = []
    for line in text.splitlines():
        name, _, capability = line.rpartition(",")
        if name.strip() and _CAPABILITY.match(capability.strip()):
            gpus.append(Gpu(name.strip(), capability.strip()))
    return gpus


def query_gpus() -> list[Gpu]:
    """The GPUs nvidia-smi sees; none when it is absent or fails (no driver)."""
    try:
        result = subprocess.run(GPU_QUERY, capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return []
    return parse_gpus(result.stdout) if result.returncode == 0 else []


def arch_list(capabilities: Iterable[str]) -> str:
    """TORCH_CUDA_ARCH_LIST for these compute capabilities: each once, oldest first (`8.0;9.0`)."""
    unique = {capability.strip() for capability in capabilities if capability.strip()}
    return ";".join(sorted(unique, key=lambda c: tuple(int(part) for part in c.split("."))))


def nvcc_release(version_text: str) -> str | None:
    """`13.0` from `nvcc --version` output (`Cuda compilation tools, release 13.0, V13.0.48`)."""
    match = _RELEASE.search(version_text)
    return match[1] if match else None


def nvcc_version(nvcc: Path) -> str | None:
    """The release of `nvcc` (`13.0`), or None when it does not run. (A rank asks its own
    zerolab.rank.nvcc, which also lists what nvcc builds.)"""
    try:
        result = subprocess.run([str(nvcc), "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return nvcc_release(result.stdout) if result.returncode == 0 else None


def pip_toolkit(python: Path) -> Path | None:
    """The CUDA toolkit that NVIDIA's pip wheels (nvidia-cuda-nvcc with its headers, e.g. through
    `cuda-toolkit[nvcc,cccl]`) put into `python`'s environment, `site-packages/nvidia/cu13`
    (CUDA 13's layout: bin/nvcc, include, lib), or None."""
    found = sorted((python.parent.parent / "lib").glob("python3*/site-packages/nvidia/cu*/bin/nvcc"))
    return found[-1].parent.parent if found else None


def toolkit_home(python: Path, inherited: Mapping[str, str]) -> Path | None:
    """The CUDA_HOME to give the engine for the pip toolkit in `python`'s environment: torch's
    extension builder looks for nvcc only in CUDA_HOME, on PATH and in /usr/local/cuda, and Megatron
    runs `$CUDA_HOME/bin/nvcc -V` at every CUDA start. None when `inherited` sets CUDA_HOME itself
    or there is no pip toolkit. Its libraries need their unversioned names (link_libraries) on
    LIBRARY_PATH: the wheels ship libcudart.so.13 alone, and builds link with -lcudart."""
    return None if inherited.get("CUDA_HOME") else pip_toolkit(python)


def link_libraries(toolkit: Path, link_dir: Path) -> list[str]:
    """Link each versioned library of `toolkit`/lib (libcudart.so.13) that has no unversioned name
    there under that name (libcudart.so) in `link_dir`; returns the names linked."""
    link_dir.mkdir(parents=True, exist_ok=True)
    linked = []
    for library in sorted((toolkit / "lib").glob("lib*.so.*")):
        name = library.name.split(".so.", 1)[0] + ".so"
        if (toolkit / "lib" / name).exists() or name in linked:
            continue
        link = link_dir / name
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(library)
        linked.append(name)
    return linked


@dataclass(frozen=True)
class CudaPlan:
    """Whether the engine's CUDA builds are needed here and what they target. `problem` is what
    stands in the way (a `what` and its `fix`), or None."""

    needed: bool
    reason: str
    arch_list: str | None = None
    gpus: tuple[Gpu, ...] = ()
    torch_cuda: str | None = None
    nvcc: str | None = None
    nvcc_release: str | None = None
    problem: dict[str, str] | None = None


def plan(probe: dict, gpus: list[Gpu], env_arch_list: str | None = None) -> CudaPlan:
    """The plan from the engine environment's probe (zerolab/rank/engine_probe.py: `torch`,
    `cuda_version`, `cuda_home`, `devices`), the GPUs nvidia-smi sees, and TORCH_CUDA_ARCH_LIST."""
    torch, torch_cuda = probe.get("torch"), probe.get("cuda_version")
    named = ", ".join(f"{gpu.name} (compute capability {gpu.capability})" for gpu in gpus)
    if torch is None:
        return CudaPlan(False, "no torch in the engine environment", gpus=tuple(gpus))
    if torch_cuda is None:
        if not gpus:
            return CudaPlan(False, f"no GPU, and torch {torch} is a CPU build: the engine trains on CPU")
        problem = {
            "what": f"a CUDA build of torch: nvidia-smi sees {named}, but the engine's torch {torch} "
            "is a CPU build (it would train on CPU)",
            "fix": "install the engine's pinned torch as a CUDA build (pip's default on Linux x86_64), "
            "then make setup",
        }
        return CudaPlan(False, f"torch {torch} is a CPU build", gpus=tuple(gpus), problem=problem)
    seen_by_torch = [device["capability"] for device in probe.get("devices", []) if "capability" in device]
    capabilities = [gpu.capability for gpu in gpus] or seen_by_torch
    arch = env_arch_list or (arch_list(capabilities) if capabilities else None)
    if arch is None:
        return CudaPlan(
            False,
            f"torch {torch} is built for CUDA {torch_cuda} but no GPU is visible "
            f"(set {ARCH_LIST_VARIABLE} to build for GPUs elsewhere)",
            torch_cuda=torch_cuda,
        )
    nvcc = Path(probe["cuda_home"]) / "bin" / "nvcc" if probe.get("cuda_home") else None
    release = nvcc_version(nvcc) if nvcc is not None else None
    source = f"{ARCH_LIST_VARIABLE}={arch}" + (
        "" if env_arch_list else f" from {named or 'the GPUs torch sees'}"
    )
    reason = f"torch {torch} (CUDA {torch_cuda}); builds for {source}"
    problem = None
    if release is None:
        problem = {
            "what": f"nvcc, the CUDA compiler, for apex and Megatron's fused kernels (torch found none: "
            f"{nvcc or 'no CUDA_HOME'})",
            "fix": f"install the CUDA {torch_cuda} toolkit (or set CUDA_HOME to it), then make setup",
        }
    else:
        reason += f" with nvcc {release} ({nvcc})"
    return CudaPlan(
        True,
        reason,
        arch_list=arch,
        gpus=tuple(gpus),
        torch_cuda=torch_cuda,
        nvcc=str(nvcc) if nvcc else None,
        nvcc_release=release,
        problem=problem,
    )


def env_arch_list() -> str | None:
    """TORCH_CUDA_ARCH_LIST when set (not empty)."""
    return os.environ.get(ARCH_LIST_VARIABLE) or None
