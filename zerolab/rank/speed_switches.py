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

import contextlib
import functools
import gc
import importlib
import os
import types
from collections.abc import Callable
from typing import Any

from zerolab.contracts import (
    ATTENTION_ENV,
    GC_INTERVAL,
    LADDER_ENV,
    SDPA,
    SPEED_ENV,
    SWITCH_NAMES,
    SWITCHES,
    Switch,
    not_used_line,
)
from zerolab.rank.import_hooks import LaunchPatch, patch_after_import

TRANSFORMER = "megatron.model.transformer"
TENSOR_PARALLEL_DATA = "megatron.core.tensor_parallel.data"
FUSED_LAYER_NORM = "megatron.model.fused_layer_norm"
TRAINING = "megatron.training"
DS_TIMER = "deepspeed.utils.timer"
SCHEDULES = "megatron.core.pipeline_parallel.schedules"

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

    return _module_proxy(torch, tensor=scalar_tensor)


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
            if torch.compiler.is_compiling():  # inside a compiled layer: traced, never TorchScript
                return eager(*args)
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


# --- compiled_layers ---------------------------------------------------------------------------


def _say_once(said: set[str], name: str, text: str, *, used: bool = True) -> None:
    """Print `zerolab: NAME: TEXT` (or, not `used`, the contracts' not_used_line) once per process."""
    if name not in said:
        said.add(name)
        print(f"zerolab: {name}: {text}" if used else not_used_line(name, text), flush=True)


def _compiled_layers(module: types.ModuleType) -> None:
    """Each ParallelTransformerLayer's forward by torch.compile (regional compilation, as
    Megatron-DeepSpeed PR #322 measured): one code object compiled once, its graph shared by every
    layer (the layers' parameters are the graph's inputs), where compiling the whole model would
    recompile on the engine's per-step integers. What would break the graph inside a layer is
    answered while compiling only: the engine's try/except TypeError around self-attention (the
    argument its attention does not take is dropped), the TorchScript bias-dropout-add (its eager
    twin), make_viewless_tensor (applied to the compiled layer's output instead) and the
    model-parallel RNG fork around attention dropout (at tensor parallel 1 every draw comes from the
    one generator). Other layouts (tensor parallel > 1, ZeRO-3's partitioned weights, MoE, sequence
    parallelism, generation with a key-value cache) run the engine's layer, and say so once."""
    import torch

    layer_class = module.ParallelTransformerLayer
    engine_forward = layer_class.forward
    attention_forward = module.ParallelAttention.forward
    make_viewless_tensor = module.core.utils.make_viewless_tensor
    tensor_parallel = module.tensor_parallel
    # A layer's integers (query-key layer scaling's coefficient is its number) are inputs of the
    # one graph, not constants that would compile it once per layer.
    torch._dynamo.config.allow_unspec_int_on_nn_module = True
    compiled_forward = torch.compile(engine_forward)
    said: set[str] = set()

    @functools.cache
    def layout_reason() -> str | None:
        """Why this launch's layout runs the engine's layers (its arguments do not change), or None."""
        args = module.get_args()
        reasons = [
            (
                os.environ.get(ATTENTION_ENV) != SDPA,
                "model.attention is not sdpa (the engine's attention "
                "has constants of its own in each layer, which would compile the layer once per layer)",
            ),
            (args.tensor_model_parallel_size > 1, f"tensor parallel {args.tensor_model_parallel_size}"),
            (getattr(args, "zero_stage", 0) >= 3, "ZeRO-3 (its weights are gathered by hooks)"),
            (getattr(args, "ds_sequence_parallel_size", 1) > 1, "DeepSpeed sequence parallelism"),
            (args.sequence_parallel, "sequence parallelism"),
        ]
        return next((why for met, why in reasons if met), None)

    def fallback_reason(layer: Any, kwargs: dict[str, Any]) -> str | None:
        """Why this layer runs the engine's own forward, or None to compile it."""
        if kwargs.get("inference_params") is not None:
            return "generation with a key-value cache"
        if layout_reason() is not None:
            return layout_reason()
        if layer.num_experts != 1 or layer.layer_type != module.LayerType.encoder:
            return "mixture of experts or a cross-attention layer"
        return None

    def layer_forward(self: Any, hidden_states: Any, *args: Any, **kwargs: Any) -> Any:
        if not (is_on("compiled_layers") and self.training):  # evaluation: the engine's layer
            return engine_forward(self, hidden_states, *args, **kwargs)
        reason = fallback_reason(self, kwargs)
        if reason is not None:
            _say_once(said, "compiled_layers", f"{reason}; the engine's own layers run", used=False)
            return engine_forward(self, hidden_states, *args, **kwargs)
        _say_once(said, "compiled_layers", "each transformer layer compiled, one graph for all")
        output, *rest = compiled_forward(self, hidden_states, *args, **kwargs)
        return (make_viewless_tensor(output, requires_grad=output.requires_grad, keep_graph=True), *rest)

    def attention(self: Any, *args: Any, **kwargs: Any) -> Any:
        if torch.compiler.is_compiling():
            kwargs.pop("cpu_offloading", None)  # the engine's own fallback when its attention refuses it
        return attention_forward(self, *args, **kwargs)

    def viewless(inp: Any, requires_grad: bool, keep_graph: bool) -> Any:
        if torch.compiler.is_compiling():  # a compiled graph's output is made viewless after it
            return inp
        return make_viewless_tensor(inp, requires_grad, keep_graph)

    class _NoFork:
        def fork(self, *args: Any, **kwargs: Any) -> Any:
            return contextlib.nullcontext()

    def rng_tracker() -> Any:
        if torch.compiler.is_compiling():  # compiled layers run at tensor parallel 1 only
            return _NoFork()
        return tensor_parallel.get_cuda_rng_tracker()

    core_proxy = _module_proxy(
        module.core, utils=_module_proxy(module.core.utils, make_viewless_tensor=viewless)
    )
    module.core = core_proxy  # type: ignore[attr-defined]
    module.tensor_parallel = _module_proxy(tensor_parallel, get_cuda_rng_tracker=rng_tracker)  # type: ignore[attr-defined]
    layer_forward.__wrapped__ = engine_forward  # type: ignore[attr-defined]
    attention.__wrapped__ = attention_forward  # type: ignore[attr-defined]
    layer_class.forward = layer_forward
    module.ParallelAttention.forward = attention


def _module_proxy(original: types.ModuleType, **replaced: Any) -> types.ModuleType:
    """A stand-in for `original` with the attributes `replaced`, everything else looked up in it."""
    proxy = types.ModuleType(original.__name__)
    proxy.__dict__.update(original.__dict__)
    proxy.__getattr__ = lambda name: getattr(original, name)  # type: ignore[attr-defined]
    proxy.__dict__.update(replaced)
    return proxy


# --- coalesced_grad_reduction ------------------------------------------------------------------


def _one_reduction_per_step(module: types.ModuleType) -> None:
    """Megatron's step without pipeline parallelism runs every micro batch's backward through
    DeepSpeed, whose ZeRO 1-2 optimizer copies each gradient into its reduction buckets at every
    micro batch; inside DeepSpeed's coalesce_grad_reduction() the gradients accumulate on the
    parameters and are reduced once, when the step's last backward has run. Where DeepSpeed does
    not offer it (ZeRO-0, its bf16 optimizer of ZeRO-1, pipeline parallelism) the engine's own
    reduction runs, and the rank says why once."""
    engine_loop = module.forward_backward_no_pipelining
    said: set[str] = set()

    def coalesced(*args: Any, **kwargs: Any) -> Any:
        model = kwargs.get("model")
        engine = model[0] if isinstance(model, list) else model
        if (
            not is_on("coalesced_grad_reduction")
            or kwargs.get("forward_only")
            or not hasattr(engine, "coalesce_grad_reduction")
        ):
            return engine_loop(*args, **kwargs)
        with contextlib.ExitStack() as stack:
            # last on the way out: the block gives the engine back the boundary it had on entry,
            # where Megatron's loop leaves it at the step's boundary, for engine.step() to apply it
            stack.callback(engine.set_gradient_accumulation_boundary, True)
            try:
                stack.enter_context(engine.coalesce_grad_reduction())
            except NotImplementedError as refusal:  # DeepSpeed's own word on what it supports
                why = f"{refusal}; reduced at every micro batch"
                _say_once(said, "coalesced_grad_reduction", why, used=False)
            else:
                _say_once(said, "coalesced_grad_reduction", "gradients reduced once per step")
            return engine_loop(*args, **kwargs)

    coalesced.__wrapped__ = engine_loop  # type: ignore[attr-defined]
    module.forward_backward_no_pipelining = coalesced  # type: ignore[attr-defined]


SWITCH_HOOKS: dict[str, tuple[tuple[str, Callable[[types.ModuleType], None]], ...]] = {
    "unsynced_throughput_timer": ((DS_TIMER, _timer_without_waits),),
    "sync_free_zeros": ((TRANSFORMER, _scalars_filled_on_device),),
    "async_batch_copy": ((TENSOR_PARALLEL_DATA, _copy_without_broadcast),),
    "eager_elementwise": ((TRANSFORMER, _elementwise_dispatch),),
    "host_trims": ((FUSED_LAYER_NORM, _memoised_argspec),),
    "manual_gc": ((TRAINING, _collect_between_steps),),
    "compiled_elementwise": ((TRANSFORMER, _elementwise_dispatch),),
    "compiled_layers": ((TRANSFORMER, _elementwise_dispatch), (TRANSFORMER, _compiled_layers)),
    "coalesced_grad_reduction": ((SCHEDULES, _one_reduction_per_step),),
}
"""Each switch's hooks (contracts.SWITCHES names and explains them): (engine module, patch of that module)."""

_hooked: set[tuple[str, Callable[[types.ModuleType], None]]] = set()


def ladder_asked() -> bool:
    """Whether this launch runs the speed ladder (ZEROLAB_LADDER)."""
    return bool(os.environ.get(LADDER_ENV))


def compiles_nothing() -> bool:
    """Whether this launch compiles nothing: no compiled_layers switch and no speed ladder (which
    turns it on)."""
    return "compiled_layers" not in launch_switches() and not ladder_asked()


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
