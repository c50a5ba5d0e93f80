"""What the pinned Megatron-DeepSpeed needs to run on current DeepSpeed, on CPU and on current
CUDA, applied by zerolab at launch and when `make setup` prebuilds the fused kernels (never by
editing or copying the engine's files).

Each workaround is an import hook on `sys.meta_path`: nothing of the engine is imported
until the training script imports it itself. Standard library only: this module runs in
the engine's environment before the training script.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import re
import subprocess
import sys
import sysconfig
import types
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Workaround:
    """One named fix: `why` is the one-line explanation printed at launch."""

    name: str
    why: str
    apply: Callable[[], None]


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Provides module `fullname` from `build(module)` instead of (or in the absence of) its file."""

    def __init__(self, fullname: str, build: Callable[[types.ModuleType], None]) -> None:
        self.fullname = fullname
        self.build = build

    def find_spec(self, fullname: str, path: Sequence[str] | None, target: Any = None) -> Any:
        if fullname != self.fullname:
            return None
        return importlib.util.spec_from_loader(fullname, self, origin=f"zerolab workaround for {fullname}")

    def create_module(self, spec: Any) -> None:
        return None

    def exec_module(self, module: types.ModuleType) -> None:
        self.build(module)


class _PatchAfterImport(importlib.abc.MetaPathFinder):
    """Runs each patch of module `fullname`, in order, right after its own loader executed it."""

    def __init__(self, fullname: str) -> None:
        self.fullname = fullname
        self.patches: list[Callable[[types.ModuleType], None]] = []

    def find_spec(self, fullname: str, path: Sequence[str] | None, target: Any = None) -> Any:
        if fullname != self.fullname:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return None
        original_exec = spec.loader.exec_module
        patches = self.patches

        def exec_module(module: types.ModuleType) -> None:
            original_exec(module)
            for patch in patches:
                patch(module)

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def _patch_after_import(fullname: str, patch: Callable[[types.ModuleType], None]) -> None:
    """Have `patch(module)` run once module `fullname` is imported (one hook per module)."""
    hook = next(
        (f for f in sys.meta_path if isinstance(f, _PatchAfterImport) and f.fullname == fullname), None
    )
    if hook is None:
        hook = _PatchAfterImport(fullname)
        sys.meta_path.insert(0, hook)
    hook.patches.append(patch)


KNN_MONITOR = "megatron.model.vision.knn_monitor"


def _lazy_module(module: types.ModuleType) -> None:
    """Each attribute of `module` becomes a function that loads the real module on first call."""
    fullname = module.__name__

    def load_real() -> types.ModuleType:
        parent = sys.modules[fullname.rpartition(".")[0]]
        spec = importlib.machinery.PathFinder.find_spec(fullname, parent.__path__)
        real = importlib.util.module_from_spec(spec)
        sys.modules[fullname] = real
        spec.loader.exec_module(real)
        return real

    def __getattr__(attribute: str) -> Callable[..., Any]:
        if attribute.startswith("__"):
            raise AttributeError(attribute)

        def deferred(*args: Any, **kwargs: Any) -> Any:
            return getattr(load_real(), attribute)(*args, **kwargs)

        deferred.__name__ = attribute
        return deferred

    module.__getattr__ = __getattr__  # type: ignore[attr-defined]


def lazy_vision_import() -> None:
    """Defer megatron.model.vision.knn_monitor (torchvision) until DINO pretraining calls it."""
    sys.meta_path.insert(0, _StubFinder(KNN_MONITOR, _lazy_module))


COMPRESS = "deepspeed.compression.compress"


def _compression_unavailable(module: types.ModuleType) -> None:
    def unavailable(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(
            f"{COMPRESS} is not in this DeepSpeed (removed in 0.19.7): --compression-training "
            "needs deepspeed<=0.19.6 (the version pins.toml pins)"
        )

    module.init_compression = unavailable  # type: ignore[attr-defined]
    module.redundancy_clean = unavailable  # type: ignore[attr-defined]


def missing_compression_module() -> None:
    """Provide deepspeed.compression.compress (removed in DeepSpeed 0.19.7) only where it is absent."""
    sys.meta_path.append(_StubFinder(COMPRESS, _compression_unavailable))


TRANSFORMER = "megatron.model.transformer"


def _contiguous_core_attention(module: types.ModuleType) -> None:
    core_attention = module.CoreAttention
    forward = core_attention.forward

    def contiguous_forward(self: Any, query: Any, key: Any, value: Any, *args: Any, **kwargs: Any) -> Any:
        return forward(self, query.contiguous(), key.contiguous(), value.contiguous(), *args, **kwargs)

    contiguous_forward.__wrapped__ = forward  # type: ignore[attr-defined]
    core_attention.forward = contiguous_forward


def contiguous_attention_inputs() -> None:
    """Make q/k/v contiguous before CoreAttention.forward: its .view() fails on them at micro-batch > 1."""
    _patch_after_import(TRANSFORMER, _contiguous_core_attention)


OPTIMIZER = "megatron.optimizer"


def _full_shape_is_1d(name: str, param: Any) -> bool:
    """Megatron's default no-weight-decay rule (biases and 1-D tensors), on the unpartitioned shape.

    Under `deepspeed.zero.Init` every parameter's `.shape` is `(0,)` once partitioned; its real
    shape is kept in `ds_shape`.
    """
    return name.endswith(".bias") or len(getattr(param, "ds_shape", param.shape)) == 1


def _group_by_full_shape(module: types.ModuleType) -> None:
    get_param_groups = module.get_param_groups

    def full_shape_param_groups(
        modules: Any, no_weight_decay_cond: Any, scale_lr_cond: Any, lr_mult: Any
    ) -> Any:
        return get_param_groups(modules, no_weight_decay_cond or _full_shape_is_1d, scale_lr_cond, lr_mult)

    full_shape_param_groups.__wrapped__ = get_param_groups  # type: ignore[attr-defined]
    module.get_param_groups = full_shape_param_groups  # type: ignore[attr-defined]


def zero3_weight_decay_groups() -> None:
    """Pick weight-decay groups by full shape: under ZeRO-3's zero.Init no tensor would be decayed."""
    _patch_after_import(OPTIMIZER, _group_by_full_shape)


def _decoupled_adam_on_cpu(module: types.ModuleType) -> None:
    adam = getattr(module, "Adam", None)
    if adam is not None and (adam.__module__, adam.__name__) == ("torch.optim.adam", "Adam"):
        from torch.optim import AdamW

        module.Adam = AdamW  # type: ignore[attr-defined]


def cpu_adamw_like_gpu() -> None:
    """On CPU use torch AdamW, as apex FusedAdam (GPU) and DeepSpeed's CPU Adam do, not L2 Adam."""
    _patch_after_import(OPTIMIZER, _decoupled_adam_on_cpu)


FUSED_KERNELS = "megatron.fused_kernels"
_GENCODE_TARGET = re.compile(r"(?:compute|sm)_\d+[a-z]?")


def buildable_gencode(flags: list[str], targets: frozenset[str]) -> tuple[list[str], list[str]]:
    """`flags` without the `-gencode` pairs that name an architecture outside `targets` (what
    nvcc can build), and the flags left out."""
    kept: list[str] = []
    dropped: list[str] = []
    i = 0
    while i < len(flags):
        if flags[i] == "-gencode" and i + 1 < len(flags):
            pair, value = flags[i : i + 2], flags[i + 1]
        elif flags[i].startswith("-gencode="):
            pair, value = flags[i : i + 1], flags[i].removeprefix("-gencode=")
        else:
            kept.append(flags[i])
            i += 1
            continue
        buildable = all(target in targets for target in _GENCODE_TARGET.findall(value))
        (kept if buildable else dropped).extend(pair)
        i += len(pair)
    return kept, dropped


class _BuildableArchsOnly:
    """Stands in for torch.utils.cpp_extension in megatron.fused_kernels: its load() gets only
    the -gencode pairs that the nvcc of CUDA_HOME can build. Everything else is the real module."""

    def __init__(self, real: types.ModuleType) -> None:
        self._real = real
        self._said = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    def load(self, *args: Any, **kwargs: Any) -> Any:
        from zerolab.engine.cuda import nvcc_targets, nvcc_version

        flags, home = kwargs.get("extra_cuda_cflags"), self._real.CUDA_HOME
        targets = nvcc_targets(Path(home, "bin", "nvcc")) if flags and home else None
        if targets:
            kept, dropped = buildable_gencode(list(flags), targets)
            if dropped:
                kwargs["extra_cuda_cflags"] = kept
                if kwargs.get("verbose") and not self._said:
                    self._said = True
                    release = nvcc_version(Path(home, "bin", "nvcc"))
                    print(
                        f"zerolab: workaround fused_kernels_buildable_archs: nvcc {release} cannot build "
                        f"{' '.join(dropped)}: left out of Megatron's fused kernels",
                        flush=True,
                    )
        return self._real.load(*args, **kwargs)


def _buildable_archs_only(module: types.ModuleType) -> None:
    module.cpp_extension = _BuildableArchsOnly(module.cpp_extension)  # type: ignore[attr-defined]


def fused_kernels_buildable_archs() -> None:
    """Leave -gencode pairs nvcc cannot build (sm_70 on CUDA 13) out of Megatron's fused kernels."""
    _patch_after_import(FUSED_KERNELS, _buildable_archs_only)


DATASET_UTILS = "megatron.data.dataset_utils"


def _make_with_this_pythons_suffix(module: types.ModuleType) -> None:
    original = module.compile_helper

    def compile_helper() -> None:
        """Megatron's compile_helper, giving its Makefile this Python's extension suffix."""
        from zerolab.engine.data_helpers import make_command

        data_dir = Path(module.__file__).parent
        suffix = sysconfig.get_config_var("EXT_SUFFIX")
        if subprocess.run(make_command(data_dir, suffix, always=False), check=False).returncode != 0:
            print("Making C++ dataset helpers module failed, exiting.", flush=True)
            sys.exit(1)

    compile_helper.__wrapped__ = original  # type: ignore[attr-defined]
    module.compile_helper = compile_helper  # type: ignore[attr-defined]


def helpers_suffix_from_python() -> None:
    """Give the helpers' Makefile this Python's extension suffix (it asks python3-config: none in a venv)."""
    _patch_after_import(DATASET_UTILS, _make_with_this_pythons_suffix)


HELPERS = "megatron.data.helpers"


class _CheckedHelpers(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Before megatron.data.helpers is imported, runs zerolab's smoke check of it in a process of
    its own; when the check fails, provides a module whose build_sample_idx is the engine's own
    Python implementation (megatron.data.gpt_dataset._build_sample_idx)."""

    def find_spec(self, fullname: str, path: Sequence[str] | None, target: Any = None) -> Any:
        if fullname != HELPERS or not path:
            return None
        from zerolab.engine.data_helpers import smoke_check

        self.check = smoke_check(Path(next(iter(path))), Path(sys.executable))
        if self.check.ok:
            return None  # the compiled helpers load as usual
        return importlib.util.spec_from_loader(
            fullname, self, origin="zerolab workaround python_sample_index"
        )

    def create_module(self, spec: Any) -> None:
        return None

    def exec_module(self, module: types.ModuleType) -> None:
        detail = self.check.detail
        print(
            f"zerolab: workaround python_sample_index: Megatron's C++ dataset helpers fail zerolab's check "
            f"({detail}): the sample index is built by the engine's Python _build_sample_idx",
            flush=True,
        )
        module.build_sample_idx = importlib.import_module("megatron.data.gpt_dataset")._build_sample_idx  # type: ignore[attr-defined]

        def __getattr__(name: str) -> Any:
            if name.startswith("__"):
                raise AttributeError(name)
            raise AttributeError(
                f"{HELPERS}.{name}: Megatron's C++ dataset helpers fail zerolab's check ({detail}) and only "
                "build_sample_idx has a Python stand-in"
            )

        module.__getattr__ = __getattr__  # type: ignore[attr-defined]


def python_sample_index() -> None:
    """Where Megatron's C++ build_sample_idx fails a check in a process of its own, use the Python one."""
    sys.meta_path.insert(0, _CheckedHelpers())


WORKAROUNDS: tuple[Workaround, ...] = tuple(
    Workaround(name=function.__name__, why=(function.__doc__ or "").strip(), apply=function)
    for function in (
        lazy_vision_import,
        missing_compression_module,
        contiguous_attention_inputs,
        zero3_weight_decay_groups,
        cpu_adamw_like_gpu,
        fused_kernels_buildable_archs,
        helpers_suffix_from_python,
        python_sample_index,
    )
)


def apply_all() -> list[Workaround]:
    """Install every workaround's import hook; returns them in the order applied."""
    for workaround in WORKAROUNDS:
        workaround.apply()
    return list(WORKAROUNDS)
