"""Torch stand-ins for what Megatron-DeepSpeed imports from NVIDIA apex on CUDA, so that the engine
runs on a GPU machine with no apex and nothing compiled.

Where apex is not installed, an import hook (rank/import_hooks.py) provides the modules `apex`,
`apex.normalization`, `apex.normalization.fused_layer_norm`, `apex.optimizers`,
`apex.multi_tensor_apply`, `amp_C` and `fused_layer_norm_cuda`. Two pieces compute, in torch:
`FusedLayerNormAffineFunction` (torch's layer norm) and `FusedAdam` (torch's Adam/AdamW, fused on
CUDA). Everything else the engine imports (FusedSGD, MixedFusedRMSNorm, multi_tensor_applier, any
amp_C or fused_layer_norm_cuda function) can be imported but refuses to be constructed or called,
saying how to get the real apex. `apex.contrib` and `fused_weight_gradient_mlp_cuda` stay absent:
the engine imports them inside try/except and takes its plain path.

Standard library only at import: this runs in every rank before the training script; torch is
imported when a stand-in module is first imported.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
import types
from collections.abc import Callable
from typing import Any

from zerolab.rank.import_hooks import StubFinder, launch_patch

BUILD_APEX = "python -m zerolab.engine.build apex --workdir DIR"


def refusal(name: str) -> str:
    """Why `name` (an apex piece the stand-ins do not compute) cannot be used, and the fix."""
    return (
        f"{name}: zerolab's torch stand-in for NVIDIA apex does not provide it (it provides "
        "FusedLayerNormAffineFunction and FusedAdam as AdamW or Adam only). Install NVIDIA apex in the "
        f"engine's environment (the GPU image has it), or build it with `{BUILD_APEX}`"
    )


def refused_function(name: str) -> Callable[..., Any]:
    """A function that raises NotImplementedError(refusal(name)) when called."""

    def refused(*args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(refusal(name))

    refused.__name__ = refused.__qualname__ = name.rpartition(".")[2]
    return refused


def refused_class(name: str) -> type:
    """A class that raises NotImplementedError(refusal(name)) when constructed."""

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        raise NotImplementedError(refusal(name))

    short = name.rpartition(".")[2]
    return type(short, (), {"__init__": __init__, "__doc__": f"Refused: {refusal(name)}"})


def _compiled_extension(module: types.ModuleType) -> None:
    """amp_C, fused_layer_norm_cuda: every function is there, and refused when called."""

    def __getattr__(attribute: str) -> Any:
        if attribute.startswith("__"):
            raise AttributeError(attribute)
        return refused_function(f"{module.__name__}.{attribute}")

    module.__getattr__ = __getattr__  # type: ignore[attr-defined]


def _fused_layer_norm(module: types.ModuleType) -> None:
    # torch here, not at the top: only in the engine's environment
    from torch.nn import functional

    class FusedLayerNormAffineFunction:
        """apex's affine layer norm as torch's F.layer_norm, differentiated by autograd. Like apex it
        computes in fp32 for fp16/bf16 inputs (F.layer_norm on CUDA accumulates in fp32) and returns
        the input's dtype. `memory_efficient` (apex: keep the output, not the input, for the backward
        pass) is accepted and has no effect: torch keeps the input."""

        @staticmethod
        def forward(
            ctx: Any,
            input: Any,
            weight: Any,
            bias: Any,
            normalized_shape: Any,
            eps: float,
            memory_efficient: bool = False,
        ) -> Any:
            return functional.layer_norm(input, normalized_shape, weight, bias, eps)

        @classmethod
        def apply(cls, *args: Any) -> Any:
            """apply(input, weight, bias, normalized_shape, eps[, memory_efficient]), as apex's."""
            return cls.forward(None, *args)

    FusedLayerNormAffineFunction.__qualname__ = "FusedLayerNormAffineFunction"  # not <locals>
    module.FusedLayerNormAffineFunction = FusedLayerNormAffineFunction  # type: ignore[attr-defined]


def _normalization(module: types.ModuleType) -> None:
    module.__path__ = []  # a package: its fused_layer_norm submodule is a stand-in too
    module.MixedFusedRMSNorm = refused_class("apex.normalization.MixedFusedRMSNorm")  # type: ignore[attr-defined]
    importlib.import_module("apex.normalization.fused_layer_norm")  # as apex's own __init__ does


def _optimizers(module: types.ModuleType) -> None:
    # torch here, not at the top: only in the engine's environment
    import torch

    def param_groups(params: Any) -> list[dict[str, Any]]:
        """`params` (tensors or group dicts, either possibly a generator) as group dicts of lists."""
        items = list(params)
        groups = items if items and isinstance(items[0], dict) else [{"params": items}]
        listed = []
        for group in groups:
            tensors = group["params"]
            listed.append({**group, "params": [tensors] if torch.is_tensor(tensors) else list(tensors)})
        return listed

    class FusedAdam(torch.optim.Adam):
        """apex's FusedAdam as torch's: AdamW (decoupled weight decay, apex's default adam_w_mode=True)
        or Adam with L2 regularization (adam_w_mode=False); torch's fused kernel when every parameter
        is on CUDA, torch's default implementation otherwise. AMSGrad, no bias correction,
        capturable and master_weights are refused."""

        def __init__(
            self,
            params: Any,
            lr: float = 1e-3,
            bias_correction: bool = True,
            betas: tuple[float, float] = (0.9, 0.999),
            eps: float = 1e-8,
            adam_w_mode: bool = True,
            weight_decay: float = 0.0,
            amsgrad: bool = False,
            set_grad_none: bool = True,
            capturable: bool = False,
            master_weights: bool = False,
        ) -> None:
            unsupported = {
                "amsgrad=True": amsgrad,  # apex refuses it too
                "bias_correction=False": not bias_correction,
                "capturable=True": capturable,
                "master_weights=True": master_weights,
            }
            for option, asked in unsupported.items():
                if asked:
                    raise NotImplementedError(refusal(f"apex.optimizers.FusedAdam({option})"))
            groups = param_groups(params)
            on_cuda = all(param.is_cuda for group in groups for param in group["params"])
            super().__init__(
                groups,
                lr=lr,
                betas=betas,
                eps=eps,
                weight_decay=weight_decay,
                fused=True if on_cuda else None,
                decoupled_weight_decay=adam_w_mode,  # torch's AdamW is Adam with this set
            )
            self.set_grad_none = set_grad_none

        def zero_grad(self, set_to_none: bool | None = None) -> None:
            """Gradients to None (apex's set_grad_none=True) or to zero."""
            super().zero_grad(self.set_grad_none if set_to_none is None else set_to_none)

    FusedAdam.__qualname__ = "FusedAdam"  # in DeepSpeed's log, not _optimizers.<locals>.FusedAdam
    module.FusedAdam = FusedAdam  # type: ignore[attr-defined]
    module.FusedSGD = refused_class("apex.optimizers.FusedSGD")  # type: ignore[attr-defined]


def _multi_tensor_apply(module: types.ModuleType) -> None:
    module.multi_tensor_applier = refused_function("apex.multi_tensor_apply.multi_tensor_applier")  # type: ignore[attr-defined]


def _apex(module: types.ModuleType) -> None:
    module.__path__ = []  # a package whose only submodules are the stand-ins below
    for name in ("optimizers", "normalization"):  # as apex's own __init__ does (DeepSpeed looks)
        importlib.import_module(f"apex.{name}")


STANDIN_MODULES: dict[str, Callable[[types.ModuleType], None]] = {
    "apex": _apex,
    "apex.normalization": _normalization,
    "apex.normalization.fused_layer_norm": _fused_layer_norm,
    "apex.optimizers": _optimizers,
    "apex.multi_tensor_apply": _multi_tensor_apply,
    "amp_C": _compiled_extension,
    "fused_layer_norm_cuda": _compiled_extension,
}
"""Each module the stand-ins provide, and what builds it."""


def apex_missing() -> bool:
    """Whether this Python has no apex package (found, not imported)."""
    return importlib.util.find_spec("apex") is None


def standins_wanted() -> bool:
    """Whether a launch needs the stand-ins: apex is missing and the engine may run on CUDA (a CPU
    launch, DS_ACCELERATOR=cpu, takes none of the engine's apex imports)."""
    return os.environ.get("DS_ACCELERATOR") != "cpu" and apex_missing()


def apex_torch_standins() -> None:
    """No NVIDIA apex here: its layer norm and FusedAdam are torch's; the rest refuses when used."""
    for name, build in STANDIN_MODULES.items():
        sys.meta_path.append(StubFinder(name, build))  # last: anything that finds the real one wins


APEX_TORCH_STANDINS = launch_patch(apex_torch_standins, wanted=standins_wanted)
"""The launch patch: applied only off CPU where apex cannot be found; a real apex is used as it is."""
