"""Stand-ins for a CUDA toolkit's nvcc, for tests on a machine without one: each answers
`--version`, `--list-gpu-arch` and `--list-gpu-code` as that release of nvcc does (CUDA 13
dropped Maxwell, Pascal and Volta: nothing below compute capability 7.5), and fails to compile."""

from __future__ import annotations

from pathlib import Path

ARCHS = {
    "13.0": "75 80 86 87 88 89 90 100 103 110 120 121",
    "12.9": "50 52 53 60 61 62 70 72 75 80 86 87 89 90 100 101 103 120 121",
}
BUILT = {"13.0": "V13.0.48", "12.9": "V12.9.86"}


def cuda_toolkit(root: Path, release: str) -> Path:
    """A directory laid out like CUDA_HOME whose bin/nvcc stands in for nvcc `release`."""
    nvcc = root / f"cuda-{release}" / "bin" / "nvcc"
    nvcc.parent.mkdir(parents=True)
    archs = ARCHS[release].split()
    lines = {
        "--version|-V": [
            "nvcc: NVIDIA (R) Cuda compiler driver",
            f"Cuda compilation tools, release {release}, {BUILT[release]}",
        ],
        "--list-gpu-arch": [f"compute_{arch}" for arch in archs],
        "--list-gpu-code": [f"sm_{arch}" for arch in archs],
    }
    cases = "".join(
        f"  {option}) printf '%s\\n' {' '.join(repr(line) for line in out)} ;;\n"
        for option, out in lines.items()
    )
    nvcc.write_text(
        f'#!/bin/sh\ncase "$1" in\n{cases}  *) echo "nvcc stand-in: cannot compile" >&2; exit 1 ;;\nesac\n'
    )
    nvcc.chmod(0o755)
    return nvcc.parent.parent
