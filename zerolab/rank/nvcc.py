"""What the CUDA compiler a run builds the fused kernels with can do: its release and the
architectures it builds (the workaround fused_kernels_buildable_archs asks). Standard library only."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

_RELEASE = re.compile(r"release (\d+\.\d+)")
_TARGET = re.compile(r"\b(?:compute|sm)_\d+[a-z]?\b")


def nvcc_release(version_text: str) -> str | None:
    """`13.0` from `nvcc --version` output (`Cuda compilation tools, release 13.0, V13.0.48`)."""
    match = _RELEASE.search(version_text)
    return match[1] if match else None


def nvcc_targets(nvcc: Path) -> frozenset[str] | None:
    """The virtual (`compute_90`) and real (`sm_90`) architectures `nvcc` can build, from
    `--list-gpu-arch` and `--list-gpu-code`; None when it cannot say (or does not run)."""
    found: set[str] = set()
    for option in ("--list-gpu-arch", "--list-gpu-code"):
        try:
            result = subprocess.run([str(nvcc), option], capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired):
            return None
        if result.returncode != 0:
            return None
        found.update(_TARGET.findall(result.stdout))
    return frozenset(found) or None


def nvcc_version(nvcc: Path) -> str | None:
    """The release of `nvcc` (`13.0`), or None when it does not run."""
    try:
        result = subprocess.run([str(nvcc), "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return nvcc_release(result.stdout) if result.returncode == 0 else None
