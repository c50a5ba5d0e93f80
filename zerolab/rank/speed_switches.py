"""zerolab's speed switches: each a change of the engine's host-side work that the speed ladder
(zerolab.rank.speed_ladder) measures on a GPU, selectable per recipe (the `speed` section, rendered
into ZEROLAB_SPEED) and proven on CPU to train to the same losses where it says so.

Every switch is an import hook that replaces an engine function by one that asks `is_on(NAME)` at
each call, so the ladder can switch it on and off between iterations of one running process; a
switch off runs the engine's own function. Its hook is installed when ZEROLAB_SPEED names it or a
ladder is asked for (ZEROLAB_LADDER). Standard library at import: this module runs in every rank
before the training script (torch is imported only once the engine module it patches is).
"""

from __future__ import annotations

import functools
import gc
import importlib
import os
import types
from collections.abc import Callable
from typing import Any

from zerolab.contracts import GC_INTERVAL, LADDER_ENV, SPEED_ENV, SWITCH_NAMES, SWITCHES, Switch
from zerolab.rank.import_hooks import LaunchPatch, patch_after_import

TRANSFORMER = "megatron.model.transformer"
TENSOR_PARALLEL_DATA = "megatron.core.tensor_parallel.data"
FUSED_LAYER_NORM = "megatron.model.fused_layer_norm"
TRAINING = "megatron.training"
DS_TIMER = "deepspeed.utils.timer"

_on: set[str] = set()


def is_on(name: str) -> bool:
    """Whether switch `name` is on now."""
    return name in _on


def set_on(names: set[str] | frozenset[str]) -> None:
    """Turn exactly `names` on (the others off), from now on."""
    unknown = set(names) - set(SWITCH_NAMES)
    if unknown:
        raise ValueError(
            f"no speed switch {', '.join(sorted(unknown))}; the switches: {', '.join(SWITCH_NAMES)}"
        )
    _on.clear()
    _on.update(names)


def on_now() -> frozenset[str]:
    """The switches on now."""
    return frozenset(_on)


def launch_switches() -> frozenset[str]:
    """The switches ZEROLAB_SPEED names; ValueError for a name zerolab does not know."""
    names = frozenset(name.strip() for name in os.environ.get(SPEED_ENV, "").split(",") if name.strip())
    unknown = names - set(SWITCH_NAMES)
    if unknown:
        raise ValueError(
            f"{SPEED_ENV}={os.environ[SPEED_ENV]!r}: no speed switch {', '.join(sorted(unknown))}; "
            f"the switches: {', '.join(SWITCH_NAMES)}"
        )
    return names


# --- sync_free_zeros ---------------------------------------------------------------------------


def _torch_without_scalar_copies(torch: types.ModuleType) -> types.ModuleType:
    """A stand-in for the `torch` module whose `tensor(number, device=...)` fills the device
    tensor in place (torch.full) instead of copying a host number to it."""
    proxy = types.ModuleType(torch.__name__)
    proxy.__dict__.update(torch.__dict__)
    proxy.__getattr__ = lambda name: getattr(torch, name)  # type: ignore[attr-defined]
    tensor = torch.tensor

    def scalar_tensor(data: Any, *args: Any, **kwargs: Any) -> Any:
        if (
            is_on("sync_free_zeros")
            and not args
            and type(data) in (int, float, bool)
            and kwargs.get("device") is not None
            and set(kwargs) <= {"device", "dtype", "requires_grad"}
        ):
            return torch.full((), data, **kwargs)
        return tensor(data, *args, **kwargs)

    proxy.tensor = scalar_tensor  # type: ignore[attr-defined]
    return proxy


def _scalars_filled_on_device(module: types.ModuleType) -> None:
    """Each transformer layer makes two zeros per forward pass as torch.tensor(0.0, device=...): a
    copy of a host number, after which the host waits for the GPU to finish all it was given
    (pytorch#120996)."""
    module.torch = _torch_without_scalar_copies(module.torch)  # type: ignore[attr-defined]


# --- async_batch_copy --------------------------------------------------------------------------


def _copy_without_broadcast(module: types.ModuleType) -> None:
    """At tensor-parallel size 1 the engine's broadcast_data broadcasts the batch's sizes to the
    rank itself, reads them back (.cpu(), a wait for the GPU) and copies the batch from pageable
    memory (another wait); the rank's own batch, copied from pinned memory, is the same tensors."""
    broadcast_data = module.broadcast_data
    parallel_state = importlib.import_module("megatron.core.parallel_state")

    def batch_to_device(keys: list[str], data: dict[str, Any], datatype: Any) -> dict[str, Any]:
        alone = (
            parallel_state.get_tensor_model_parallel_world_size() == 1
            and parallel_state.get_sequence_parallel_world_size() == 1
        )
        if not (is_on("async_batch_copy") and alone):
            return broadcast_data(keys, data, datatype)
        module._check_data_types(keys, data, datatype)
        device = module.get_accelerator().current_device_name()
        copies = {}
        for key in keys:
            tensor = data[key].contiguous()
            if device != "cpu" and not tensor.is_pinned():
                tensor = tensor.pin_memory()
            copies[key] = tensor.to(device, non_blocking=True)
        return copies

    batch_to_device.__wrapped__ = broadcast_data  # type: ignore[attr-defined]
    module.broadcast_data = batch_to_device  # type: ignore[attr-defined]


# --- unsynced_throughput_timer -----------------------------------------------------------------


def _timer_without_waits(module: types.ModuleType) -> None:
    """DeepSpeed's throughput timer waits for the GPU at the start of every forward pass and at
    every step (timers.throughput.synchronized, DeepSpeed PR #5363); zerolab reads Megatron's
    iteration times, not this timer's."""
    timer_class = module.ThroughputTimer
    for method_name in ("start", "stop"):
        method = getattr(timer_class, method_name)

        def unsynced(self: Any, *args: Any, _method: Callable[..., Any] = method, **kwargs: Any) -> Any:
            if not (is_on("unsynced_throughput_timer") and self.config.synchronized):
                return _method(self, *args, **kwargs)
            self.config.synchronized = False
            try:
                return _method(self, *args, **kwargs)
            finally:
                self.config.synchronized = True

        unsynced.__wrapped__ = method  # type: ignore[attr-defined]
        setattr(timer_class, method_name, unsynced)


# --- eager_elementwise, compiled_elementwise ---------------------------------------------------


def _gelu_tanh(bias: Any, y: Any) -> Any:
    import torch.nn.functional as F

    return F.gelu(y + bias, approximate="tanh")


def _elementwise_dispatch(module: types.ModuleType) -> None:
    """The engine's "fused" bias-GeLU and bias-dropout-add are TorchScript functions; since torch
    2.2 TorchScript fuses nothing on GPU (nvFuser left it), so they run op by op, each call paying
    TorchScript's interpreter on the host as well."""
    import torch

    scripted_gelu = module.bias_gelu_impl
    scripted_train = module.bias_dropout_add_fused_train
    scripted_inference = module.bias_dropout_add_fused_inference
    bias_dropout_add = module.bias_dropout_add

    def eager_train(x: Any, bias: Any, residual: Any, prob: float) -> Any:
        return bias_dropout_add(x, bias, residual, prob, True)

    def eager_inference(x: Any, bias: Any, residual: Any, prob: float) -> Any:
        return bias_dropout_add(x, bias, residual, prob, False)

    @functools.cache
    def compiled(function: Callable[..., Any]) -> Callable[..., Any]:
        return torch.compile(function, fullgraph=True, dynamic=False)

    def pick(scripted: Callable[..., Any], eager: Callable[..., Any]) -> Callable[..., Any]:
        def chosen(*args: Any) -> Any:
            if is_on("compiled_elementwise"):
                return compiled(eager)(*args)
            if is_on("eager_elementwise"):
                return eager(*args)
            return scripted(*args)

        chosen.__wrapped__ = scripted  # type: ignore[attr-defined]
        return chosen

    def gelu(intermediate: Any, bias: Any) -> Any:  # the engine's argument order: (input, bias)
        return _gelu_tanh(bias, intermediate)

    module.bias_gelu_impl = pick(scripted_gelu, gelu)  # type: ignore[attr-defined]
    module.bias_dropout_add_fused_train = pick(scripted_train, eager_train)  # type: ignore[attr-defined]
    module.bias_dropout_add_fused_inference = pick(scripted_inference, eager_inference)  # type: ignore[attr-defined]


# --- host_trims --------------------------------------------------------------------------------


def _memoised_argspec(module: types.ModuleType) -> None:
    """Megatron's fused layer norm inspects apex's function signature at every call (63 us each on a
    CPU); the sdpa patch forks the model-parallel RNG state around attention even with no dropout to
    draw."""
    inspect = module.inspect
    proxy = types.ModuleType(inspect.__name__)
    proxy.__dict__.update(inspect.__dict__)
    cached = functools.cache(inspect.getfullargspec)

    def getfullargspec(function: Any) -> Any:
        return cached(function) if is_on("host_trims") else inspect.getfullargspec(function)

    proxy.getfullargspec = getfullargspec  # type: ignore[attr-defined]
    module.inspect = proxy  # type: ignore[attr-defined]


# --- manual_gc ---------------------------------------------------------------------------------


def _collect_between_steps(module: types.ModuleType) -> None:
    """Python's collector pauses at arbitrary points of a step (Megatron-LM's --manual-gc): here it
    runs between steps only, every GC_INTERVAL of them."""
    train_step = module.train_step
    steps = 0

    def train_step_manual_gc(*args: Any, **kwargs: Any) -> Any:
        nonlocal steps
        if is_on("manual_gc"):
            if gc.isenabled():
                gc.disable()
                gc.collect()
            steps += 1
            if steps % GC_INTERVAL == 0:
                gc.collect()
        elif not gc.isenabled():
            gc.enable()
        return train_step(*args, **kwargs)

    train_step_manual_gc.__wrapped__ = train_step  # type: ignore[attr-defined]
    module.train_step = train_step_manual_gc  # type: ignore[attr-defined]


SWITCH_HOOKS: dict[str, tuple[tuple[str, Callable[[types.ModuleType], None]], ...]] = {
    "unsynced_throughput_timer": ((DS_TIMER, _timer_without_waits),),
    "sync_free_zeros": ((TRANSFORMER, _scalars_filled_on_device),),
    "async_batch_copy": ((TENSOR_PARALLEL_DATA, _copy_without_broadcast),),
    "eager_elementwise": ((TRANSFORMER, _elementwise_dispatch),),
    "host_trims": ((FUSED_LAYER_NORM, _memoised_argspec),),
    "manual_gc": ((TRAINING, _collect_between_steps),),
    "compiled_elementwise": ((TRANSFORMER, _elementwise_dispatch),),
}
"""Each switch's hooks (contracts.SWITCHES names and explains them): (engine module, patch of that module)."""

_hooked: set[tuple[str, Callable[[types.ModuleType], None]]] = set()


def ladder_asked() -> bool:
    """Whether this launch runs the speed ladder (ZEROLAB_LADDER)."""
    return bool(os.environ.get(LADDER_ENV))


def _launch_patch(switch: Switch) -> LaunchPatch:
    def apply() -> None:
        if switch.name in launch_switches():
            _on.add(switch.name)
        for hook in SWITCH_HOOKS[switch.name]:
            if hook not in _hooked:  # eager and compiled elementwise share one hook
                _hooked.add(hook)
                patch_after_import(*hook)

    def wanted() -> bool:
        return switch.name in launch_switches() or ladder_asked()

    return LaunchPatch(switch.name, switch.doc, apply, wanted, kind="switch")


SPEED_SWITCHES: tuple[LaunchPatch, ...] = tuple(_launch_patch(switch) for switch in SWITCHES)
"""What megatron_entry applies: each switch's hooks, when ZEROLAB_SPEED names it or a ladder runs."""
