"""What the pinned Megatron-DeepSpeed needs to run on current DeepSpeed, on CPU and on current
CUDA, applied by zerolab at launch and when `make setup` prebuilds the fused kernels (never by
editing or copying the engine's files). The opt-in patches a launch asks for are modules of their
own: rank/sdpa_attention.py and rank/step_profile.py.

Each workaround is an import hook on `sys.meta_path` (rank/import_hooks.py): nothing of the
engine is imported until the training script imports it itself. Standard library only at import:
this module runs in the engine's environment before the training script (a patch imports torch
only once the engine module it patches has been imported).
"""

from __future__ import annotations

import contextlib
import functools
import gc
import hashlib
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import inspect
import json
import os
import platform
import re
import sys
import time
import types
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from zerolab.contracts import DEEPSPEED_CONFIG_FLAGS
from zerolab.rank.import_hooks import (
    LaunchPatch,
    StubFinder,
    always,
    apply_wanted,
    import_inside,
    launch_patch,
    patch_after_import,
)
from zerolab.rank.nvcc import nvcc_targets, nvcc_version
from zerolab.rank.sample_index_check import smoke_check
from zerolab.rank.speed_switches import compiles_nothing
from zerolab.rank.standins import StandingIn, deferred_globals, real_module

KNN_MONITOR = "megatron.model.vision.knn_monitor"


def _lazy_module(module: types.ModuleType) -> None:
    """Each attribute of `module` becomes a function that loads the real module on first call."""

    def __getattr__(attribute: str) -> Callable[..., Any]:
        if attribute.startswith("__"):
            raise AttributeError(attribute)

        def deferred(*args: Any, **kwargs: Any) -> Any:
            return getattr(real_module(module), attribute)(*args, **kwargs)

        deferred.__name__ = attribute
        return deferred

    module.__getattr__ = __getattr__  # type: ignore[attr-defined]


def lazy_vision_import() -> None:
    """Defer megatron.model.vision.knn_monitor (torchvision) until DINO pretraining calls it."""
    sys.meta_path.insert(0, StubFinder(KNN_MONITOR, _lazy_module))


WANDB = "wandb"


def _forwarding_module(module: types.ModuleType) -> None:
    """`module` imports the real one when first asked for an attribute, and hands each on from it."""

    def __getattr__(attribute: str) -> Any:
        return getattr(real_module(module), attribute)

    module.__getattr__ = __getattr__  # type: ignore[attr-defined]


# megatron/training.py imports wandb at its top, in every rank, whether or not the run logs to W&B:
# 0.4 s a rank (its Settings model parses its own source for field docs), measured on 2 cores.
def lazy_wandb_import() -> None:
    """Import wandb (0.4 s a rank) only once a run that logs to W&B uses it, not in every rank."""
    if importlib.machinery.PathFinder.find_spec(WANDB) is not None:  # else the engine's ImportError stays
        sys.meta_path.insert(0, StubFinder(WANDB, _forwarding_module))


TRANSFORMERS = "transformers"
HYBRID_ENGINE = "deepspeed.runtime.hybrid_engine"
TRANSFORMERS_READERS = (
    "deepspeed.linear.context_manager",  # `import transformers`: read when its Init context is entered
    HYBRID_ENGINE,  # transformers.models.opt...: read by the hybrid engine (RLHF)
    "megatron.tokenizer.tokenizer",  # `from transformers import AutoTokenizer`: read by HFTokenizer
)


def _deferred_resolved_at_init(
    module: types.ModuleType,
    class_name: str,
    wanted: Callable[[], bool] = always,
    missing: tuple[type[Exception], ...] = (),
    also: Sequence[str] = (),
) -> None:
    """Before each `module.class_name` is made, where `wanted()`, each Deferred global of `module`
    and of the modules named in `also` (those imported) becomes its attribute; one whose import or
    read raises one of `missing` becomes None."""
    made = getattr(module, class_name)
    init = made.__init__

    def resolving_init(self: Any, *args: Any, **kwargs: Any) -> None:
        if wanted():
            for each in (module, *filter(None, map(sys.modules.get, also))):
                for name, value in deferred_globals(each).items():
                    try:
                        setattr(each, name, value.resolve())
                    except missing:
                        setattr(each, name, None)
        init(self, *args, **kwargs)

    resolving_init.__wrapped__ = init  # type: ignore[attr-defined]
    made.__init__ = resolving_init


def _resolve_deferred_globals(module: types.ModuleType) -> None:
    """Once the hybrid engine is made: None where transformers lacks an attribute, as the module's
    own `except (ImportError, AttributeError)` gave."""
    _deferred_resolved_at_init(module, "DeepSpeedHybridEngine", missing=(ImportError, AttributeError))


# DeepSpeed's hybrid engine and OptimizedLinear, and Megatron's tokenizer module, import transformers
# at their top, in every rank, for what a GPT pretraining run never calls (the OPT embedding of RLHF
# generation, Hugging Face model patching, HFTokenizer): about 3 s of each rank's 10 s of imports,
# measured on 2 cores (PYTHONPROFILEIMPORTTIME in a rank: transformers 0.8 s, the OPT model 1 s,
# AutoTokenizer 1.3 s).
def lazy_transformers_import() -> None:
    """Import transformers (3 s a rank) once a run uses it, not at DeepSpeed's and Megatron's imports."""
    if importlib.machinery.PathFinder.find_spec(TRANSFORMERS) is None:  # the engine's own ImportError stays
        return
    standing_in = StandingIn(TRANSFORMERS)
    for reader in TRANSFORMERS_READERS:
        import_inside(reader, standing_in.reading)
    patch_after_import(HYBRID_ENGINE, _resolve_deferred_globals)


TORCH = "torch"
DYNAMO = "torch._dynamo"
COMPILED_AUTOGRAD = "torch._dynamo.compiled_autograd"
DS_COMPILER = "deepspeed.runtime.compiler"
DS_ENGINE = "deepspeed.runtime.engine"
DEEPCOMPILE = (
    "deepspeed.compile.backend",
    "deepspeed.compile.passes",
    "deepspeed.compile.passes.contract",
    "deepspeed.compile.init_z1_and_2",
    "deepspeed.compile.init_z3",
    "deepspeed.compile.init_sp",
    "deepspeed.compile.init_tp",
)
"""DeepCompile's modules DeepSpeed's engine imports at its top (they import dynamo and inductor);
it uses them only where DeepCompile is supported (CUDA)."""
DC_CUSTOM_OPS = "deepspeed.compile.custom_ops"
DC_CUSTOM_OP_MODULES = (f"{DC_CUSTOM_OPS}.all_to_all", f"{DC_CUSTOM_OPS}.tp_collectives")
"""The modules registering DeepCompile's custom ops (all_to_all imports sympy), imported with
DeepSpeed's config through deepspeed.compile; only DeepCompile's passes call the ops."""


def _compiler_once_used(torch: types.ModuleType) -> None:
    if not (hasattr(torch, "compile") and hasattr(getattr(torch, "compiler", None), "disable")):
        return  # a torch without a compiler: nothing imports one
    compile_now, disable = torch.compile, torch.compiler.disable

    def compile_on_first_call(model: Any = None, **options: Any) -> Any:
        if model is None:  # @torch.compile(...)
            return functools.partial(compile_on_first_call, **options)
        if DYNAMO in sys.modules or not inspect.isfunction(model):
            return compile_now(model, **options)
        compiled: list[Any] = []

        @functools.wraps(model)
        def call(*args: Any, **kwargs: Any) -> Any:
            if not compiled:  # torch.compile compiles on the first call too: only dynamo's import moves
                compiled.append(compile_now(model, **options))
            return compiled[0](*args, **kwargs)

        return call

    def disable_when_compiling(fn: Any = None, recursive: bool = True, *, reason: Any = None) -> Any:
        if fn is None:  # @torch.compiler.disable(recursive=...)
            return functools.partial(disable_when_compiling, recursive=recursive, reason=reason)
        if DYNAMO in sys.modules or not inspect.isfunction(fn):
            return disable(fn, recursive, reason=reason)
        disabled: list[Any] = []

        @functools.wraps(fn)
        def call(*args: Any, **kwargs: Any) -> Any:
            if DYNAMO not in sys.modules:  # nothing can be compiling: disabling changes nothing
                return fn(*args, **kwargs)
            if not disabled:
                disabled.append(disable(fn, recursive, reason=reason))
            return disabled[0](*args, **kwargs)

        return call

    compile_on_first_call.__wrapped__ = compile_now  # type: ignore[attr-defined]
    disable_when_compiling.__wrapped__ = disable  # type: ignore[attr-defined]
    torch.compile = compile_on_first_call  # type: ignore[attr-defined]
    torch.compiler.disable = disable_when_compiling
    _internal_disables_once_compiling(torch)
    _optimizer_steps_once_compiling(torch)


TORCH_DISABLED = "__dynamo_disable"
"""Where torch._disable_dynamo's wrapper keeps the disabled function it makes at its first call."""


def _as_is_until_compiling(wrapper: Any) -> Any:
    """Seed `wrapper`'s cache with a call of its function as it is while dynamo is not loaded; once
    it is, empty the cache and let the wrapper disable the function as torch does."""
    fn = getattr(wrapper, "__wrapped__", None)

    def call(*args: Any, **kwargs: Any) -> Any:
        if DYNAMO not in sys.modules:  # nothing can be compiling: disabling changes nothing
            return fn(*args, **kwargs)
        if getattr(fn, TORCH_DISABLED, None) is call:
            delattr(fn, TORCH_DISABLED)
        return wrapper(*args, **kwargs)

    with contextlib.suppress(AttributeError, TypeError):  # a callable without attributes: as torch left it
        if fn is not None and getattr(fn, TORCH_DISABLED, None) is None:
            setattr(fn, TORCH_DISABLED, call)
    return wrapper


def _internal_disables_once_compiling(torch: types.ModuleType) -> None:
    """torch marks its own functions with torch._disable_dynamo, whose wrapper imports dynamo at the
    first call (the optimizers' add_param_group, zero_grad and step functions, checkpoint): those
    made at torch's import are found by their wrapper's code, those made later at once."""
    make = getattr(getattr(torch, "_compile", None), "_disable_dynamo", None)
    if make is None:
        return
    wrapper_code = make(lambda: None).__code__
    for each in gc.get_objects():
        if type(each) is types.FunctionType and each.__code__ is wrapper_code:
            _as_is_until_compiling(each)

    def disable_dynamo(fn: Any = None, recursive: bool = True) -> Any:
        if fn is None:  # @torch._disable_dynamo(recursive=...)
            return functools.partial(disable_dynamo, recursive=recursive)
        return _as_is_until_compiling(make(fn, recursive))

    disable_dynamo.__wrapped__ = make  # type: ignore[attr-defined]
    torch._compile._disable_dynamo = disable_dynamo
    torch._disable_dynamo = disable_dynamo  # type: ignore[attr-defined]


def _step_until_compiling(torch: types.ModuleType, marked: Any) -> Any:
    """`marked` (an optimizer's step as torch wraps it) where dynamo is loaded; before, its step
    under the grad mode the wrapper sets, without the wrapper's graph breaks (nothing compiles)."""
    step = marked.__wrapped__

    @functools.wraps(step)
    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        if DYNAMO in sys.modules:
            return marked(self, *args, **kwargs)
        with torch.set_grad_enabled(self.defaults["differentiable"]):
            return step(self, *args, **kwargs)

    return call


def _optimizer_steps_once_compiling(torch: types.ModuleType) -> None:
    """torch's optimizers' step imports dynamo at each call to mark graph breaks around it
    (torch.optim.optimizer._use_grad_for_differentiable): each such step of torch's optimizer
    classes imports it only once it is loaded."""
    marking = getattr(sys.modules.get("torch.optim.optimizer"), "_use_grad_for_differentiable", None)
    if marking is None:
        return
    marked_code = marking(lambda *args, **kwargs: None).__code__
    classes = [torch.optim.Optimizer]
    while classes:
        each = classes.pop()
        classes.extend(each.__subclasses__())
        step = each.__dict__.get("step")
        if getattr(step, "__code__", None) is marked_code and hasattr(step, "__wrapped__"):
            each.step = _step_until_compiling(torch, step)


def _deepcompile_resolved_where_supported(module: types.ModuleType) -> None:
    """Where DeepCompile is supported (CUDA), the engine registers its passes at __init__: all of it,
    its custom ops registered."""
    _deferred_resolved_at_init(
        module, "DeepSpeedEngine", lambda: module.is_deepcompile_supported(), also=(DC_CUSTOM_OPS,)
    )


@contextlib.contextmanager
def _all_reading(standing_in: Sequence[StandingIn]) -> Iterator[None]:
    with contextlib.ExitStack() as stack:
        for each in standing_in:
            stack.enter_context(each.reading())
        yield


# DeepSpeed imports torch's compiler at its import, in every rank, whether or not anything compiles:
# DeepCompile's modules at the engine's top, compiled autograd's switch in runtime/compiler.py,
# torch.compile of functions it may call (MoE gating helpers, Muon's step), and
# torch.compiler.disable of its ZeRO-3 and communication functions, which imports dynamo to mark
# them. About 4 s of a rank's 8 s of imports on 2 cores (PYTHONPROFILEIMPORTTIME: dynamo 2.3 s,
# inductor's compile_fx 1.6 s; benchmarks/rank_startup.py). torch itself imports dynamo at the
# optimizer's construction and step (its own torch._disable_dynamo marks, and the graph breaks
# around each step), and DeepSpeed's config imports DeepCompile's custom ops (sympy, 1 s). A launch
# that compiles nothing (no speed.compiled_layers, no speed ladder) imports them once used: a
# function given to torch.compile is compiled at its first call (as torch.compile does), a disabled
# one and an optimizer's step run as they are while dynamo is not loaded (nothing can be compiling),
# then as torch wrapped them, and the custom ops are registered where DeepCompile is supported.
def lazy_compiler_import() -> None:
    """Import torch's compiler (dynamo, inductor, sympy: 7 s a rank) once a run compiles, not at start-up."""
    patch_after_import(TORCH, _compiler_once_used)
    import_inside(DS_COMPILER, StandingIn(COMPILED_AUTOGRAD).reading)
    deepcompile = [StandingIn(name) for name in DEEPCOMPILE]
    import_inside(DS_ENGINE, lambda: _all_reading(deepcompile))
    custom_ops = [StandingIn(name) for name in DC_CUSTOM_OP_MODULES]
    import_inside(DC_CUSTOM_OPS, lambda: _all_reading(custom_ops))
    patch_after_import(DS_ENGINE, _deepcompile_resolved_where_supported)


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
    sys.meta_path.append(StubFinder(COMPRESS, _compression_unavailable))


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
    patch_after_import(TRANSFORMER, _contiguous_core_attention)


def _ulysses_batch_dimension(module: types.ModuleType) -> None:
    distributed = getattr(module, "DistributedAttention", None)
    if distributed is None:  # a DeepSpeed without it: the engine refuses sequence parallelism itself
        return
    forward = distributed.forward

    def forward_with_batch_dimension(
        self: Any, query: Any, key: Any, value: Any, *args: Any, **kwargs: Any
    ) -> Any:
        # torch here, not at the top: only in the engine's environment
        import torch

        if not (args and torch.is_tensor(args[0])):  # the flash paths: already DeepSpeed's call
            return forward(self, query, key, value, *args, **kwargs)
        attention, gather = self.local_attn, self.gather_idx

        def by_head(q: Any, k: Any, v: Any, *rest: Any, **named: Any) -> Any:
            # [b, s, heads / sequence, d] -> the engine's [s, b, ...] -> [b, s, heads / sequence, d]
            context = attention(q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1), *rest, **named)
            return context.view(*context.shape[:2], q.shape[2], -1).transpose(0, 1)

        object.__setattr__(self, "local_attn", by_head)
        self.gather_idx = 1  # the sequence dimension of [b, s, heads, d]
        try:
            batch_first = (tensor.transpose(0, 1) for tensor in (query, key, value))
            output = forward(self, *batch_first, 0, None, *args, **kwargs)  # [b, s / sequence, heads, d]
        finally:
            object.__delattr__(self, "local_attn")
            self.gather_idx = gather
        return output.transpose(0, 1).reshape(query.shape[0], query.shape[1], -1).contiguous()

    forward_with_batch_dimension.__wrapped__ = forward  # type: ignore[attr-defined]
    module.DistributedAttention = type(
        "DistributedAttention", (distributed,), {"forward": forward_with_batch_dimension}
    )


# DeepSpeed-Ulysses (--ds-sequence-parallel-size) with the engine's own attention: the pinned
# engine calls DistributedAttention(q, k, v, attention_mask) and its CoreAttention returns
# [s, b, heads x head dim], while DeepSpeed 0.14+ takes the batch dimension fourth (q, k, v,
# batch_dim_idx, rotary_pos_emb, *args) and exchanges the output by head; its first step failed
# ("Boolean value of Tensor with more than one value is ambiguous"). The exchange is given the
# batch-first layout, [b, s, heads, head dim], which the flash-v2 path uses: DeepSpeed 0.19.6
# mislabels the shape of a sequence-first exchange back to the sequence ([b, s x sequence, heads /
# sequence, d] for [s / sequence, b, heads, d]), whose backward then fails.
def ulysses_batch_dimension() -> None:
    """Ulysses with the engine's attention: give DistributedAttention q/k/v batch first, output by head."""
    patch_after_import(TRANSFORMER, _ulysses_batch_dimension)


SEQUENCE_CROSS_ENTROPY = "megatron.core.sequence_parallel.cross_entropy"


def _gather_into_flat_tensor(module: types.ModuleType) -> None:
    function = module._VocabSequenceParallelCrossEntropy
    forward = function.forward

    def forward_gathering_flat(ctx: Any, *args: Any, **kwargs: Any) -> Any:
        # torch here, not at the top: only in the engine's environment
        import torch.distributed as dist

        gather = dist.all_gather_into_tensor

        def flat(output: Any, input: Any, group: Any = None, async_op: bool = False) -> Any:
            return gather(output.view(-1), input.reshape(-1), group=group, async_op=async_op)

        dist.all_gather_into_tensor = flat
        try:
            return forward(ctx, *args, **kwargs)
        finally:
            dist.all_gather_into_tensor = gather

    forward_gathering_flat.__wrapped__ = forward  # type: ignore[attr-defined]
    function.forward = staticmethod(forward_gathering_flat)


# Under sequence parallelism the engine's loss gathers each rank's [s / sequence x b] losses into a
# [s, b] tensor; NCCL takes any shapes of equal size, gloo splits the output along its first
# dimension and refused ("ProcessGroupGloo::allgather: invalid tensor size at index 0 (expected
# (128), got (64, 2))"). The same elements land in the same places when both are flat.
def ulysses_loss_gather_on_gloo() -> None:
    """Ulysses: gather the losses into a flat view of the [s, b] tensor, which gloo takes too."""
    patch_after_import(SEQUENCE_CROSS_ENTROPY, _gather_into_flat_tensor)


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
    patch_after_import(OPTIMIZER, _group_by_full_shape)


def _decoupled_adam_on_cpu(module: types.ModuleType) -> None:
    adam = getattr(module, "Adam", None)
    if adam is not None and (adam.__module__, adam.__name__) == ("torch.optim.adam", "Adam"):
        # torch here, not at the top: only in the engine's environment
        from torch.optim import AdamW

        module.Adam = AdamW  # type: ignore[attr-defined]


def cpu_adamw_like_gpu() -> None:
    """On CPU use torch AdamW, as apex FusedAdam (GPU) and DeepSpeed's CPU Adam do, not L2 Adam."""
    patch_after_import(OPTIMIZER, _decoupled_adam_on_cpu)


DS_CHECKPOINTING = "deepspeed.runtime.activation_checkpointing.checkpointing"


class _StreamlessAccelerator:
    """An accelerator as DeepSpeed's activation checkpointing sees it: the real one, except that
    where it has no streams (CPU), `Stream(...)` makes a stand-in that is never used."""

    def __init__(self, accelerator: Any) -> None:
        self._accelerator = accelerator

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._accelerator, name)
        if name == "Stream" and value is None:
            return lambda *args, **kwargs: None
        return value


def _distinct_copies(before: Any, after: Any, criterion: Callable[[Any], bool]) -> Any:
    """`after` (a copy of `before`), with every checkpointed tensor that the copy returned as
    itself (`.to(device)` on the device it is already on) cloned."""
    if after is before and criterion(before):
        return before.clone()
    if isinstance(after, (list, tuple)):
        return type(after)(_distinct_copies(b, a, criterion) for b, a in zip(before, after, strict=True))
    if isinstance(after, dict):
        return {key: _distinct_copies(before[key], value, criterion) for key, value in after.items()}
    return after


def _cpu_checkpointing(module: types.ModuleType) -> None:
    get_accelerator, copy_to_device = module.get_accelerator, module.copy_to_device

    def accelerator_for_checkpointing() -> Any:
        return _StreamlessAccelerator(get_accelerator())

    def copy_that_copies(item: Any, device: Any, criterion_func: Callable[[Any], bool]) -> Any:
        return _distinct_copies(item, copy_to_device(item, device, criterion_func), criterion_func)

    accelerator_for_checkpointing.__wrapped__ = get_accelerator  # type: ignore[attr-defined]
    copy_that_copies.__wrapped__ = copy_to_device  # type: ignore[attr-defined]
    module.get_accelerator = accelerator_for_checkpointing  # type: ignore[attr-defined]
    module.copy_to_device = copy_that_copies  # type: ignore[attr-defined]


# DeepSpeed's activation checkpointing asks the accelerator for a side stream that it never uses,
# and the CPU has none; its checkpoint-in-CPU copy of a CPU tensor is the tensor itself, which it
# then empties for the backward pass.
def cpu_activation_checkpointing() -> None:
    """DeepSpeed's activation checkpointing on CPU: a stand-in for the side stream, real CPU copies."""
    patch_after_import(DS_CHECKPOINTING, _cpu_checkpointing)


def _merge_each_argument_once(module: types.ModuleType) -> None:
    merge_tensors = module.merge_tensors

    def merge_partitioned(tensor_objects: Any, non_tensor_objects: Any, tensor_flags: Any) -> Any:
        if not module.PARTITION_ACTIVATIONS:
            return merge_tensors(tensor_objects, non_tensor_objects, tensor_flags)
        # Saved as a (value, size) pair per argument: the even entries are the arguments.
        tensors, others = iter(tensor_objects), iter(list(non_tensor_objects)[::2])
        return tuple(next(tensors) if flag else next(others) for flag in list(tensor_flags)[::2])

    merge_partitioned.__wrapped__ = merge_tensors  # type: ignore[attr-defined]
    module.merge_tensors = merge_partitioned  # type: ignore[attr-defined]


# With partition_activations DeepSpeed saves a (value, size) pair per argument, but restores a
# non-tensor argument (Megatron passes None) with its None size as a second argument, so the
# recomputed layer gets too many (DeepSpeed PR #8455).
def partitioned_checkpoint_arguments() -> None:
    """Restore each argument of a partitioned activation checkpoint once (DeepSpeed PR #8455)."""
    patch_after_import(DS_CHECKPOINTING, _merge_each_argument_once)


TENSOR_PARALLEL = "megatron.core.tensor_parallel"


def _reset_contiguous_checkpoints_too(module: types.ModuleType) -> None:
    reset_buffer = module.reset_checkpointed_activations_memory_buffer

    def reset_buffers() -> None:
        # deepspeed here, not at the top: only in the engine's environment
        from deepspeed.runtime.activation_checkpointing import checkpointing

        reset_buffer()
        checkpointing.reset()

    reset_buffers.__wrapped__ = reset_buffer  # type: ignore[attr-defined]
    module.reset_checkpointed_activations_memory_buffer = reset_buffers  # type: ignore[attr-defined]


# With contiguous_memory, DeepSpeed frees its checkpoint buffers in the backward pass only, and the
# engine never resets them after a forward-only pass (evaluation): the passes after it run past the
# buffers' end. They are reset where the engine resets its own, before each checkpointed forward
# pass: the previous pass's checkpoints are consumed or unwanted by then.
def contiguous_checkpoints_in_eval() -> None:
    """Reset DeepSpeed's contiguous checkpoint buffers before each forward pass (evaluation has none)."""
    patch_after_import(TENSOR_PARALLEL, _reset_contiguous_checkpoints_too)


def _differentiable_placeholders(outputs: Any) -> Any:
    """A checkpointed chunk's outputs, with each placeholder after the hidden states (a dense
    layer's MoE loss, a zero without a gradient) replaced by a zero that takes one."""
    if not isinstance(outputs, tuple):
        return outputs
    # torch here, not at the top: only in the engine's environment
    import torch

    return (
        outputs[0],
        *(
            value.detach().clone().requires_grad_()
            if torch.is_tensor(value) and value.is_floating_point() and not value.requires_grad
            else value
            for value in outputs[1:]
        ),
    )


def _checkpoint_with_differentiable_placeholders(module: types.ModuleType) -> None:
    checkpoint = module.checkpoint

    def checkpoint_chunk(function: Callable[..., Any], *args: Any) -> Any:
        def run_chunk(*inputs: Any) -> Any:
            return _differentiable_placeholders(function(*inputs))

        return checkpoint(run_chunk, *args)

    checkpoint_chunk.__wrapped__ = checkpoint  # type: ignore[attr-defined]
    module.checkpoint = checkpoint_chunk  # type: ignore[attr-defined]


# A checkpointed chunk of layers returns its hidden states and one MoE loss per layer, a plain zero
# for a dense layer. Megatron's own checkpoint drops that zero in the backward pass only for a
# chunk of one layer; with recompute_num_layers > 1 the backward pass is handed zeros without a
# gradient and fails ("element 1 of tensors does not require grad").
def recompute_chunks_of_layers() -> None:
    """Give recomputed chunks of several layers differentiable MoE-loss zeros, as one layer gets."""
    patch_after_import(TENSOR_PARALLEL, _checkpoint_with_differentiable_placeholders)


FUSED_KERNELS = "megatron.fused_kernels"


def _load_only_when_called(module: types.ModuleType) -> None:
    load = module.load

    def load_when_called(args: Any) -> Any:
        if args.masked_softmax_fusion:
            return load(args)
        if os.environ.get("RANK", "0") == "0":
            print(
                "zerolab: workaround fused_kernels_only_when_called: --no-masked-softmax-fusion: Megatron's "
                "fused softmax kernels are never called, so neither built nor loaded",
                flush=True,
            )
        return None

    load_when_called.__wrapped__ = load  # type: ignore[attr-defined]
    module.load = load_when_called  # type: ignore[attr-defined]


# On CUDA Megatron builds and loads its fused softmax kernels at every launch (nvcc, minutes on a
# bare machine); only FusedScaleMaskSoftmax calls them, and only with --masked-softmax-fusion.
def fused_kernels_only_when_called() -> None:
    """Build and load Megatron's fused softmax kernels only where they are called (masked-softmax fusion)."""
    patch_after_import(FUSED_KERNELS, _load_only_when_called)


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


class _CppExtensionStandIn:
    """Stands in for torch.utils.cpp_extension in megatron.fused_kernels: a subclass changes
    load(); everything else is the module it wraps (the real one, or another stand-in)."""

    def __init__(self, real: Any) -> None:
        self._real = real

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    @classmethod
    def replace_in(cls, module: types.ModuleType) -> None:
        """Put a stand-in of this class in front of `module`'s cpp_extension (a patch_after_import patch)."""
        module.cpp_extension = cls(module.cpp_extension)  # type: ignore[attr-defined]


class _BuildableArchsOnly(_CppExtensionStandIn):
    """load() gets only the -gencode pairs that the nvcc of CUDA_HOME can build."""

    _said = False

    def load(self, *args: Any, **kwargs: Any) -> Any:

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


def fused_kernels_buildable_archs() -> None:
    """Leave -gencode pairs nvcc cannot build (sm_70 on CUDA 13) out of Megatron's fused kernels."""
    patch_after_import(FUSED_KERNELS, _BuildableArchsOnly.replace_in)


def stale_build_lock(build_directory: Path, *, min_age_s: float = 10.0) -> Path | None:
    """torch's JIT build lock (`lock` in the build directory) when no build holds it: older than
    `min_age_s` and no process working in the directory (torch runs ninja there). torch waits
    for the lock to go away, forever and silently, so a build that was stopped hangs the next."""
    lock = build_directory / "lock"
    try:
        age = time.time() - lock.stat().st_mtime
    except FileNotFoundError:
        return None
    if age < min_age_s:
        return None
    directory = build_directory.resolve()
    for entry in Path("/proc").glob("[0-9]*/cwd"):
        try:
            cwd = entry.resolve(strict=True)
        except OSError:  # gone, or not ours to read
            continue
        if cwd == directory or directory in cwd.parents:
            return None
    return lock


class _StaleLockCleared(_CppExtensionStandIn):
    """load() first removes a build lock that no build holds (stale_build_lock)."""

    def load(self, *args: Any, **kwargs: Any) -> Any:
        directory = kwargs.get("build_directory")
        lock = stale_build_lock(Path(directory)) if directory else None
        if lock is not None:
            lock.unlink(missing_ok=True)
            print(
                f"zerolab: workaround fused_kernels_stale_lock: removed {lock}, left by a build that was "
                "stopped (torch would wait for it forever)",
                flush=True,
            )
        return self._real.load(*args, **kwargs)


def fused_kernels_stale_lock() -> None:
    """Remove the fused kernels' build lock a stopped build left, on which torch waits forever."""
    patch_after_import(FUSED_KERNELS, _StaleLockCleared.replace_in)


DATASET_UTILS = "megatron.data.dataset_utils"


def _compile_nothing(module: types.ModuleType) -> None:
    original = module.compile_helper

    def compile_helper() -> None:
        """Megatron's compile_helper, compiling nothing: `make setup` built the helpers."""
        print(
            "zerolab: workaround helpers_not_built_at_launch: Megatron's dataset helpers are built by "
            "`make setup`, not at launch",
            flush=True,
        )

    compile_helper.__wrapped__ = original  # type: ignore[attr-defined]
    module.compile_helper = compile_helper  # type: ignore[attr-defined]


# Megatron compiles its dataset helpers (make, g++) in rank 0 at every launch. zerolab builds them
# at set-up with this Python's extension suffix (`make setup`, the image) and smoke-checks them;
# where they are missing or fail the check, python_sample_index stands in.
def helpers_not_built_at_launch() -> None:
    """A launch compiles nothing: Megatron's dataset helpers are built at set-up (or stood in for)."""
    patch_after_import(DATASET_UTILS, _compile_nothing)


HELPERS = "megatron.data.helpers"


class _CheckedHelpers(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Before megatron.data.helpers is imported, runs zerolab's smoke check of it in a process of
    its own; when the check fails, provides a module whose build_sample_idx is the engine's own
    Python implementation (megatron.data.gpt_dataset._build_sample_idx)."""

    def find_spec(self, fullname: str, path: Sequence[str] | None, target: Any = None) -> Any:
        if fullname != HELPERS or not path:
            return None

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


DS_TORCH_BACKEND = "deepspeed.comm.torch"
SHM_DIRECTORY = Path("/dev/shm")


def allreduce_buffer(rank: int, environ: dict[str, str] | None = None) -> Path:
    """The shared-memory file DeepSpeed's CPU all-reduce creates for `rank` of the launch whose
    MASTER_ADDR and MASTER_PORT are in `environ` (its ops/csrc/cpu/comm/shm.cpp names it so)."""
    environ = os.environ if environ is None else environ
    address, port = environ.get("MASTER_ADDR", ""), environ.get("MASTER_PORT", "")
    return SHM_DIRECTORY / f"deepspeed_allreduce_buffer_{os.getuid()}_{address}_{port}_{rank}"


def _unlink_once_mapped(module: types.ModuleType) -> None:
    backend = module.TorchBackend
    initialize = backend.__init__

    def init_then_unlink(self: Any, *args: Any, **kwargs: Any) -> None:
        initialize(self, *args, **kwargs)
        if self.shm_comm_op is None:
            return
        # torch here, not at the top: only in the engine's environment
        import torch.distributed

        torch.distributed.barrier()  # every rank has mapped every buffer: the names can go
        allreduce_buffer(self.get_rank()).unlink(missing_ok=True)

    init_then_unlink.__wrapped__ = initialize  # type: ignore[attr-defined]
    backend.__init__ = init_then_unlink


# DeepSpeed's CPU backend gives each rank a 64 MiB all-reduce buffer in /dev/shm (host memory) and
# never unlinks it, so every CPU run used to leave 64 MiB per rank behind until memory ran out.
def shm_buffers_unlinked() -> None:
    """Unlink DeepSpeed's CPU all-reduce buffers in /dev/shm once every rank has mapped them."""
    patch_after_import(DS_TORCH_BACKEND, _unlink_once_mapped)


CPUINFO = "cpuinfo"
_CPU_LINES = ("vendor_id", "model name", "flags", "Features", "CPU implementer", "CPU part")
"""The /proc/cpuinfo fields that say which CPU this is (x86, then Arm): its answer's cache key."""


def cpu_info_file(version: str) -> Path | None:
    """Where py-cpuinfo `version`'s answer for this machine's CPU is kept: beside DeepSpeed's ops
    built for it (TORCH_EXTENSIONS_DIR, which every launch sets), named by the CPU it describes;
    None outside a launch or without /proc/cpuinfo."""
    folder = os.environ.get("TORCH_EXTENSIONS_DIR")
    if not folder:
        return None
    try:
        text = Path("/proc/cpuinfo").read_text(errors="replace")
    except OSError:
        return None
    lines = sorted({line for line in text.splitlines() if line.partition(":")[0].strip() in _CPU_LINES})
    if not lines:
        return None
    key = hashlib.sha256("\n".join([platform.machine(), version, *lines]).encode()).hexdigest()[:16]
    return Path(folder, f"cpuinfo-{key}.json")


def _kept_answer(path: Path | None) -> dict[str, Any]:
    """py-cpuinfo's answer kept at `path`; {} where there is none (or none whole)."""
    with contextlib.suppress(OSError, ValueError):
        return json.loads(path.read_text()) if path else {}
    return {}


def _keep_answer(path: Path, answer: dict[str, Any]) -> None:
    """Write `answer` to `path` whole (a rank reading it meanwhile finds none, and asks), or not at all."""
    written = path.with_name(f"{path.name}.{os.getpid()}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        written.write_text(json.dumps(answer))
        os.replace(written, path)
    except OSError:
        written.unlink(missing_ok=True)


def _ask_once(module: types.ModuleType) -> None:
    ask = module.get_cpu_info
    answer: dict[str, Any] = {}

    def get_cpu_info() -> dict[str, Any]:
        if not answer:
            path = cpu_info_file(str(getattr(module, "CPUINFO_VERSION_STRING", "")))
            answer.update(_kept_answer(path))
            if not answer:
                answer.update(ask())
                if path:
                    _keep_answer(path, answer)
        return dict(answer)  # a copy: a caller may change what it gets

    get_cpu_info.__wrapped__ = ask  # type: ignore[attr-defined]
    module.get_cpu_info = get_cpu_info  # type: ignore[attr-defined]
    for other in list(sys.modules.values()):  # those that took it by name before (cpu_adam, cpu_lion)
        if vars(other).get("get_cpu_info") is ask:
            other.get_cpu_info = get_cpu_info  # type: ignore[attr-defined]


# DeepSpeed asks py-cpuinfo about the CPU three times per rank that loads its CPU Adam (offload), and
# py-cpuinfo answers each time from a new Python process that times the clock: 1.1 s each, 3.3 s of
# every such rank's start on 2 cores, measured. DeepSpeed reads the architecture, flags and vendor.
def cpu_info_once() -> None:
    """Ask py-cpuinfo about this machine's CPU once, then read its answer, kept beside DeepSpeed's ops."""
    patch_after_import(CPUINFO, _ask_once)


DS_PARTITION_PARAMETERS = "deepspeed.runtime.zero.partition_parameters"


def _wait_for_every_gather(module: types.ModuleType) -> None:
    init = module.Init
    gather = init._allgather_params_coalesced

    def gather_every_partition(
        self: Any, param_list: list[Any], hierarchy: int = 0, quantize: bool = False
    ) -> None:
        gather(self, param_list, hierarchy, quantize)
        # torch here, not at the top: only in the engine's environment
        import torch.distributed

        groups = {id(group): group for group in (self.get_partition_dp_group(p) for p in param_list)}
        for group in groups.values():
            if torch.distributed.get_backend(group) == "gloo":
                torch.distributed.barrier(group=group)  # gloo's barrier first completes all prior work

    gather_every_partition.__wrapped__ = gather  # type: ignore[attr-defined]
    init._allgather_params_coalesced = gather_every_partition


# ZeRO-3's blocking gather of a list of parameters (GatheredParameters, persistent parameters after
# a checkpoint) starts one async all-gather per parameter and waits for the last only: on gloo each
# runs on a thread of its own, so an earlier parameter could still be arriving after the call
# returned, over what the caller wrote (a weights-only load under ZeRO-3 at tensor parallel 2 kept
# the random word embeddings in 2 of 5 test runs). Fixed in DeepSpeed 0.19.8 (PR #8539).
def zero3_gathers_complete() -> None:
    """On gloo, ZeRO-3's blocking gather of several parameters returns once every one has arrived."""
    patch_after_import(DS_PARTITION_PARAMETERS, _wait_for_every_gather)


DS_ZERO = "deepspeed.runtime.zero"


def launch_ds_config(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """The DeepSpeed config this launch names (its --deepspeed_config file), {} where none is readable."""
    argv = list(sys.argv if argv is None else argv)
    for index, token in enumerate(argv):
        name, equals, value = token.partition("=")
        if name in DEEPSPEED_CONFIG_FLAGS:
            path = value if equals else (argv[index + 1] if index + 1 < len(argv) else "")
            try:
                config = json.loads(Path(path).read_text(encoding="utf-8"))
            except (OSError, ValueError):
                return {}
            return config if isinstance(config, dict) else {}
    return {}


def mics_asked() -> bool:
    """Whether this launch's DeepSpeed config shards with MiCS (zero_optimization.mics_shard_size > 0)."""
    zero = launch_ds_config().get("zero_optimization", {})
    return isinstance(zero, dict) and int(zero.get("mics_shard_size", -1) or -1) > 0


def _init_is_mics_init(module: types.ModuleType) -> None:
    init, mics_init = module.Init, module.MiCS_Init

    def init_or_mics(*args: Any, **kwargs: Any) -> Any:
        return mics_init(*args, **kwargs) if kwargs.get("enabled", True) else init(*args, **kwargs)

    init_or_mics.__wrapped__ = init  # type: ignore[attr-defined]
    module.Init = init_or_mics


# The engine builds its ZeRO-3 model under deepspeed.zero.Init (pretrain_gpt.py model_provider);
# DeepSpeed's MiCS optimizer then stops at deepspeed.initialize: "Sharded parameters don't have the
# MiCS_CommGroups attached ... please use deepspeed.zero.MiCS_Init" (runtime/zero/mics.py).
def model_built_under_mics_init() -> None:
    """With MiCS, the engine's model is built under DeepSpeed's MiCS_Init, as its MiCS optimizer asks."""
    patch_after_import(DS_ZERO, _init_is_mics_init)


class _EveryHandle:
    """One wait for several async collectives."""

    def __init__(self, handles: list[Any]) -> None:
        self.handles = handles

    def wait(self) -> None:
        for handle in self.handles:
            handle.wait()

    def is_completed(self) -> bool:
        return all(handle.is_completed() for handle in self.handles)


def _gather_each_on_gloo(module: types.ModuleType) -> None:
    backend = module.TorchBackend
    coalesced = backend.all_gather_coalesced

    def all_gather_coalesced(
        self: Any,
        output_tensors: list[Any],
        input_tensors: list[Any],
        group: Any = None,
        async_op: bool = False,
    ) -> Any:
        import torch.distributed  # the engine's environment only

        if torch.distributed.get_backend(group) != "gloo":
            return coalesced(self, output_tensors, input_tensors, group=group, async_op=async_op)
        handles = [
            torch.distributed.all_gather_into_tensor(output, tensor, group=group, async_op=True)
            for output, tensor in zip(output_tensors, input_tensors, strict=True)
        ]
        every = _EveryHandle(handles)
        if async_op:
            return every
        every.wait()
        return None

    all_gather_coalesced.__wrapped__ = coalesced  # type: ignore[attr-defined]
    backend.all_gather_coalesced = all_gather_coalesced


# MiCS gathers a layer's weights with DeepSpeed's all_gather_coalesced, which opens torch's
# coalescing manager: gloo has no startCoalescing, so the first forward pass stops ("Backend gloo
# does not implement startCoalescing").
def mics_gathers_on_gloo() -> None:
    """With MiCS on gloo, DeepSpeed's coalesced all-gather is one all-gather per tensor, one handle."""
    patch_after_import(DS_TORCH_BACKEND, _gather_each_on_gloo)


DS_MICS = "deepspeed.runtime.zero.mics"


def _load_with_param_shapes(module: types.ModuleType) -> None:
    optimizer = module.MiCS_Optimizer
    stage3_load = module.DeepSpeedZeroOptimizer_Stage3.load_state_dict

    def load_state_dict(
        self: Any,
        state_dict_list: Any,
        load_optimizer_states: bool = True,
        load_from_fp32_weights: bool = False,
        checkpoint_folder: Any = None,
        load_serial: Any = None,
        param_shapes: Any = None,
    ) -> None:
        stage3_load(
            self, state_dict_list, load_optimizer_states, load_from_fp32_weights, checkpoint_folder,
            load_serial, param_shapes,
        )  # fmt: skip

    load_state_dict.__wrapped__ = optimizer.load_state_dict  # type: ignore[attr-defined]
    optimizer.load_state_dict = load_state_dict


def _partition_group_is_the_shard(module: types.ModuleType) -> None:
    optimizer = module.MiCS_Optimizer

    def partition_group(self: Any, param: Any) -> Any:
        return param.comm.param_shard_group

    partition_group.__wrapped__ = optimizer._get_param_partition_group  # type: ignore[attr-defined]
    optimizer._get_param_partition_group = partition_group


# MiCS_Init leaves each weight's ds_process_group the whole data-parallel group, and ZeRO-3's
# partition_grads reads its partition rank there: a rank of the second shard counts itself past the
# weight's end, keeps no gradient partition, and the all-reduce across the shard's replicas then
# waits forever (ranks with 28 buffers against ranks with 0: MiCS with replicas hangs at its first
# step, on 2 nodes x 2 ranks and with mics_shard_size 1).
def mics_partition_rank_in_its_shard() -> None:
    """MiCS's optimizer partitions each weight's gradients over the weight's shard, not the world."""
    patch_after_import(DS_MICS, _partition_group_is_the_shard)


# DeepSpeed's engine loads a ZeRO-3 checkpoint with optimizer.load_state_dict(..., param_shapes=...);
# MiCS_Optimizer overrides it without that argument, so a MiCS run cannot resume: "TypeError:
# MiCS_Optimizer.load_state_dict() got an unexpected keyword argument 'param_shapes'" (0.19.6). Its
# own body only calls ZeRO-3's, which takes it.
def mics_resumes() -> None:
    """A MiCS run resumes: its optimizer loads the checkpoint as ZeRO-3's does (param_shapes too)."""
    patch_after_import(DS_MICS, _load_with_param_shapes)


DS_ENGINE = "deepspeed.runtime.engine"


def unpartitioned_checkpoint(load_dir: str, tag: str, model_parallel_rank: int) -> Path:
    """The model-states file of one model-parallel rank in a checkpoint written without ZeRO-3
    (`zerolab import`, a ZeRO 0-2 run): the whole module, as Megatron's nested state."""
    return Path(load_dir, tag, f"mp_rank_{model_parallel_rank:02d}_model_states.pt")


def _weights_into_partitions(module: types.ModuleType) -> None:
    engine_class = module.DeepSpeedEngine
    load_checkpoint = engine_class.load_checkpoint

    def load_unpartitioned_weights(
        self: Any,
        load_dir: str,
        tag: str | None = None,
        load_module_strict: bool = True,
        load_optimizer_states: bool = True,
        load_lr_scheduler_states: bool = True,
        load_module_only: bool = False,
        custom_load_fn: Any = None,
    ) -> Any:
        path = None if tag is None else unpartitioned_checkpoint(load_dir, str(tag), self.checkpoint_mp_rank)
        ours = load_module_only and custom_load_fn is None and self.zero_optimization_partition_weights()
        if not (ours and path and path.is_file()):
            return load_checkpoint(
                self,
                load_dir,
                tag,
                load_module_strict,
                load_optimizer_states,
                load_lr_scheduler_states,
                load_module_only,
                custom_load_fn,
            )
        # deepspeed, torch here, not at the top: only in the engine's environment
        import deepspeed
        import torch

        self.optimizer.checkpoint_event_prologue()
        checkpoint = torch.load(path, map_location="cpu", weights_only=False)
        # every weight gathered, loaded, then partitioned again from data-parallel rank 0's
        with deepspeed.zero.GatheredParameters(list(self.module.parameters()), modifier_rank=0):
            self.module.load_state_dict(checkpoint["module"], strict=load_module_strict)
        self.optimizer.refresh_fp32_params()
        self.optimizer.checkpoint_event_epilogue()
        print(f"zerolab: workaround zero3_weights_only_load: weights loaded from {path}", flush=True)
        return str(path), {key: value for key, value in checkpoint.items() if key != "module"}

    load_unpartitioned_weights.__wrapped__ = load_checkpoint  # type: ignore[attr-defined]
    engine_class.load_checkpoint = load_unpartitioned_weights


# Under ZeRO-3 DeepSpeed's weights-only load (Megatron's --finetune) ignores the tag asked for and
# rebuilds the weights from the ZeRO-3 partitions that `latest` names (zero_to_fp32), so a
# checkpoint without them (zerolab import's, a ZeRO 0-2 run's) cannot be loaded; and zero_to_fp32's
# flat parameter names are not the nested state Megatron's GPTModel.load_state_dict reads.
def zero3_weights_only_load() -> None:
    """Under ZeRO-3, load weights only (--finetune) from an unpartitioned checkpoint, as ZeRO 0-2 do."""
    patch_after_import(DS_ENGINE, _weights_into_partitions)


DS_STAGE3 = "deepspeed.runtime.zero.stage3"


def _each_group_its_own_settings(module: types.ModuleType) -> None:
    optimizer_class = module.DeepSpeedZeroOptimizer_Stage3
    load = optimizer_class.load_hp_checkpoint_state_from_checkpoint_dir_stage3

    def load_with_groups_settings(self: Any, checkpoint_dir: str) -> None:
        load(self, checkpoint_dir)
        # torch here, not at the top: only in the engine's environment
        import torch

        saved = torch.load(os.path.join(checkpoint_dir, "zero", "optimizer_state.pt"), weights_only=False)
        groups = saved.get("optimizer_state_dict", saved)["param_groups"]
        for group, loaded in zip(self.optimizer.param_groups, groups, strict=True):
            group.update({key: value for key, value in loaded.items() if key != "params"})
        decays = [group.get("weight_decay") for group in self.optimizer.param_groups]
        print(
            f"zerolab: workaround zero3_universal_group_settings: weight decay by group {decays}", flush=True
        )

    load_with_groups_settings.__wrapped__ = load  # type: ignore[attr-defined]
    optimizer_class.load_hp_checkpoint_state_from_checkpoint_dir_stage3 = load_with_groups_settings


# ZeRO-3's load of a universal checkpoint gives every parameter group the settings of the first
# (DeepSpeed 0.19.6, stage3.py: param_groups[0] for all): the group without weight decay (biases,
# norms) took the first group's 0.1, and a run continued under another setup left the uninterrupted
# one's losses from its second iteration on (4.6e-4 at the second, 2.4e-3 at the third, measured).
# Each group gets its own saved settings back, as ZeRO 1-2's load does.
def zero3_universal_group_settings() -> None:
    """Under ZeRO-3, a universal checkpoint's parameter groups each keep their own settings."""
    patch_after_import(DS_STAGE3, _each_group_its_own_settings)


MEGATRON_TRAINING = "megatron.training"


def _student_set_up_once(module: types.ModuleType) -> None:
    setup = module.setup_model_and_optimizer

    def setup_student(*args: Any, **kwargs: Any) -> Any:
        engine_args = module.get_args()
        if not (engine_args.kd or engine_args.mos):
            return setup(*args, **kwargs)
        deepspeed = module.deepspeed
        initialize = deepspeed.initialize

        def initialize_student(*positional: Any, **named: Any) -> Any:
            model, optimizer = named.get("model"), named.get("optimizer")
            if isinstance(model, deepspeed.DeepSpeedEngine):  # the second time: the module it wraps,
                for hook in ("module_forward_pre_hook", "module_forward_post_hook"):  # without its hooks
                    handle = getattr(model, hook, None)
                    if handle is not None:
                        handle.remove()
                named["model"] = model.module
            elif optimizer is None:  # the first, to load the student: without ZeRO, as the teacher is
                config = dict(named.get("config") or {})
                config.pop("zero_optimization", None)
                named["config"] = config
            return initialize(*positional, **named)

        deepspeed.initialize = initialize_student
        try:
            return setup(*args, **kwargs)
        finally:
            deepspeed.initialize = initialize

    setup_student.__wrapped__ = setup  # type: ignore[attr-defined]
    module.setup_model_and_optimizer = setup_student  # type: ignore[attr-defined]

    setup_teacher = module.setup_teacher_model

    def setup_teacher_of_its_shape(engine_args: Any, *rest: Any, **named: Any) -> Any:
        shape = _teacher_shape(engine_args)
        student = {name: getattr(engine_args, name) for name in shape}
        vars(engine_args).update(shape)
        try:
            return setup_teacher(engine_args, *rest, **named)
        finally:
            vars(engine_args).update(student)

    setup_teacher_of_its_shape.__wrapped__ = setup_teacher  # type: ignore[attr-defined]
    module.setup_teacher_model = setup_teacher_of_its_shape  # type: ignore[attr-defined]


def _feed_forward_size(hidden: int, swiglu: bool) -> int:
    """Megatron's --ffn-hidden-size where none is given (megatron/arguments.py)."""
    return int((4 * hidden * 2 / 3) / 64) * 64 if swiglu else 4 * hidden


def _teacher_shape(args: Any) -> dict[str, Any]:
    """The settings Megatron derives from the model's shape, the teacher's: its depth, and those the
    student's are derived for (feed-forward size, channels a head, key-value heads) from its hidden
    size and heads, as Megatron's argument validation derives the student's."""
    heads, hidden = args.num_attention_heads_teacher, args.hidden_size_teacher
    shape: dict[str, Any] = {"encoder_num_layers": args.num_layers_teacher}
    if args.ffn_hidden_size == _feed_forward_size(args.hidden_size, args.swiglu):
        shape["ffn_hidden_size"] = _feed_forward_size(hidden, args.swiglu)
    if args.kv_channels == args.hidden_size // args.num_attention_heads:
        shape["kv_channels"] = hidden // heads
    if args.num_key_value_heads == args.num_attention_heads:
        shape["num_key_value_heads"] = heads
    return shape


# With --kd (or --mos) the engine's setup_model_and_optimizer first wraps the student in DeepSpeed
# without an optimizer (to load its checkpoint), then wraps that engine in DeepSpeed again with the
# optimizer. The first failed under ZeRO 1-3 ("zero stage 1 requires an optimizer"), and under ZeRO-0
# step 1 failed ("'dict' object has no attribute 'no_sync_func'": get_model_config found the inner
# engine's DeepSpeed config for Megatron's model config). The first wrap is made without ZeRO (as the
# engine's own load of the teacher is), the second wraps the model itself, once. And its
# setup_teacher_model gives the teacher the --*-teacher layers, hidden size and heads but keeps the
# student's encoder_num_layers, which sets the depth without pipeline parallelism (a 2-layer
# teacher's checkpoint failed to load into 1 layer: "Unexpected key(s) ... layers.1"), and the
# feed-forward size and channels a head derived from the student's hidden size: the teacher gets its own.
def distillation_student_wrapped_once() -> None:
    """With --kd/--mos, wrap the student in DeepSpeed once, and build the teacher of its own shape."""
    patch_after_import(MEGATRON_TRAINING, _student_set_up_once)


def _each_iteration_saved_once(module: types.ModuleType) -> None:
    save = module.save_checkpoint
    saved: list[int] = []

    def save_unless_saved(iteration: int, *args: Any, **kwargs: Any) -> Any:
        if saved and saved[-1] == iteration:
            if module.get_args().rank == 0:
                print(
                    f"zerolab: workaround final_checkpoint_saved_once: the checkpoint of iteration "
                    f"{iteration} is saved already; not saving it again",
                    flush=True,
                )
            return None
        result = save(iteration, *args, **kwargs)
        saved.append(iteration)
        return result

    save_unless_saved.__wrapped__ = save  # type: ignore[attr-defined]
    module.save_checkpoint = save_unless_saved  # type: ignore[attr-defined]


# Megatron-DeepSpeed's pretrain() saves after training whenever it trained, even where the loop's
# save_interval has just saved that iteration (training.py: `if args.save and iteration != 0`;
# Megatron-LM skips it when iteration % save_interval == 0): a run whose save_interval divides its
# train_iters (the demo's 60 of 60) wrote its last checkpoint twice, the whole of it, optimizer
# states too. Both saves go through megatron.training's save_checkpoint, so a second save of the
# iteration saved last, with no training between, is left out.
def final_checkpoint_saved_once() -> None:
    """Save the last iteration's checkpoint once, where save_interval divides train_iters (not twice)."""
    patch_after_import(MEGATRON_TRAINING, _each_iteration_saved_once)


def _collector_back_for_training(module: types.ModuleType) -> None:
    train = getattr(module, "train", None)
    if train is None:  # no training loop of the pinned engine's to wait for
        gc.enable()
        return

    def train_with_collector(*args: Any, **kwargs: Any) -> Any:
        gc.enable()  # speed switch manual_gc, where on, takes it over at the first step
        return train(*args, **kwargs)

    train_with_collector.__wrapped__ = train  # type: ignore[attr-defined]
    module.train = train_with_collector  # type: ignore[attr-defined]


# Python's cyclic collector runs over every object the rank has made each time the young ones pass
# its threshold: while torch, DeepSpeed and Megatron import (about 350,000 allocations, next to no
# cyclic garbage), its passes took 0.2-0.25 s of a rank's 2 CPU-s of imports on 2 cores. Forked
# processes (the data loaders' workers) get it back at once.
def collector_paused_in_start_up() -> None:
    """Pause Python's cyclic garbage collector while the rank imports and sets up; on again to train."""
    gc.disable()
    os.register_at_fork(after_in_child=gc.enable)
    patch_after_import(MEGATRON_TRAINING, _collector_back_for_training)


WANTED_ONLY: dict[Callable[[], None], Callable[[], bool]] = {
    lazy_compiler_import: compiles_nothing,
    model_built_under_mics_init: mics_asked,
    mics_gathers_on_gloo: mics_asked,
    mics_resumes: mics_asked,
    mics_partition_rank_in_its_shard: mics_asked,
}
"""The workarounds a launch applies only where it needs them (the others, every launch)."""

WORKAROUNDS: tuple[LaunchPatch, ...] = tuple(
    launch_patch(function, WANTED_ONLY.get(function, always))
    for function in (
        lazy_vision_import,
        lazy_wandb_import,
        lazy_transformers_import,
        lazy_compiler_import,
        collector_paused_in_start_up,
        missing_compression_module,
        contiguous_attention_inputs,
        ulysses_batch_dimension,
        ulysses_loss_gather_on_gloo,
        zero3_weight_decay_groups,
        cpu_adamw_like_gpu,
        cpu_activation_checkpointing,
        partitioned_checkpoint_arguments,
        contiguous_checkpoints_in_eval,
        recompute_chunks_of_layers,
        fused_kernels_only_when_called,
        fused_kernels_buildable_archs,
        fused_kernels_stale_lock,
        helpers_not_built_at_launch,
        python_sample_index,
        shm_buffers_unlinked,
        cpu_info_once,
        zero3_gathers_complete,
        zero3_weights_only_load,
        zero3_universal_group_settings,
        model_built_under_mics_init,
        mics_gathers_on_gloo,
        mics_resumes,
        mics_partition_rank_in_its_shard,
        distillation_student_wrapped_once,
        final_checkpoint_saved_once,
    )
)


DEEPSPEED_WORKAROUNDS: tuple[Callable[[], None], ...] = (shm_buffers_unlinked, cpu_info_once)
"""Those of DeepSpeed itself, no Megatron module: every DeepSpeed process applies them (fine-tuning's
too, which runs no Megatron)."""


def deepspeed_without_its_unused_imports() -> None:
    """Import DeepSpeed as a rank does, without torch's compiler and transformers until they are used:
    for the engine's processes that are no rank and use neither (doctor's probe, the universal
    checkpoint's conversion, the export of a ZeRO-3 checkpoint). `import deepspeed` took 2.7 CPU-s
    with it against 7.3 without, on 2 cores."""
    lazy_compiler_import()
    lazy_transformers_import()


def apply_all() -> list[LaunchPatch]:
    """Install the import hook of every workaround; returns them in the order applied."""
    return apply_wanted(WORKAROUNDS)
