"""Megatron's fused softmax kernels compiled ahead of time, so that no run compiles: with the same
arguments as a run with masked-softmax fusion (Megatron's default) and under the same workarounds
as at launch, so that the flags, and with them the cached build, are the ones a run asks for.
`python -m zerolab.rank.prebuild_kernels ENGINE_DIR`, in the engine's Python. Standard library at
module level."""

from __future__ import annotations

import importlib
import sys
import types
from pathlib import Path
from types import SimpleNamespace

from zerolab.rank.workarounds import apply_all


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


if __name__ == "__main__":
    prebuild(Path(sys.argv[1]))
