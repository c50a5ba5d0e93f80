"""Megatron's fused softmax kernels (megatron/fused_kernels: three CUDA extensions the engine
compiles with torch's JIT builder when a CUDA run starts), compiled ahead of time so that no run
compiles: with the same arguments as a run with masked-softmax fusion (Megatron's default) and
under the same workarounds as at launch, so that the flags, and with them the cached build,
are the ones a run asks for. Standard library at module level: run by the engine's Python."""

from __future__ import annotations

import importlib
import sys
import types
from pathlib import Path
from types import SimpleNamespace

from zerolab.engine.workarounds import apply_all

KERNELS = ("scaled_upper_triang_masked_softmax_cuda", "scaled_masked_softmax_cuda", "scaled_softmax_cuda")
"""The extensions megatron/fused_kernels/__init__.py builds with masked-softmax fusion on."""


def build_dir(engine_dir: Path) -> Path:
    """Where the engine keeps the kernels it built (its own choice)."""
    return engine_dir / "megatron" / "fused_kernels" / "build"


def built(engine_dir: Path) -> list[str]:
    """The kernels whose compiled module is in the engine's build directory."""
    return [name for name in KERNELS if (build_dir(engine_dir) / f"{name}.so").is_file()]


def prebuild(engine_dir: Path) -> None:
    """Compile the kernels in `engine_dir` as a run on this machine would: the engine's own
    megatron.fused_kernels, imported under zerolab's workarounds, loaded with a run's arguments.
    Only that subpackage is imported (the `megatron` package stands in without its __init__,
    which would import the whole engine)."""
    source = engine_dir / "megatron" / "fused_kernels" / "__init__.py"
    if not source.is_file():
        raise FileNotFoundError(f"{source}: not found; is {engine_dir} a Megatron-DeepSpeed checkout?")
    apply_all()
    package = types.ModuleType("megatron")
    package.__path__ = [str(engine_dir / "megatron")]
    sys.modules["megatron"] = package
    kernels = importlib.import_module("megatron.fused_kernels")
    kernels.load(SimpleNamespace(masked_softmax_fusion=True, rank=0))
