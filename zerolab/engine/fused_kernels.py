"""Megatron's fused softmax kernels (megatron/fused_kernels: three CUDA extensions the engine
compiles with torch's JIT builder when a CUDA run starts), compiled ahead of time so that no run
compiles, by zerolab.rank.prebuild_kernels in the engine's Python (`python -m zerolab.engine.build
fused-kernels` runs it); here, which of them are built. Standard library only."""

from __future__ import annotations

from pathlib import Path

KERNELS = ("scaled_upper_triang_masked_softmax_cuda", "scaled_masked_softmax_cuda", "scaled_softmax_cuda")
"""The extensions megatron/fused_kernels/__init__.py builds with masked-softmax fusion on."""


def build_dir(engine_dir: Path) -> Path:
    """Where the engine keeps the kernels it built (its own choice)."""
    return engine_dir / "megatron" / "fused_kernels" / "build"


def built(engine_dir: Path) -> list[str]:
    """The kernels whose compiled module is in the engine's build directory."""
    return [name for name in KERNELS if (build_dir(engine_dir) / f"{name}.so").is_file()]
