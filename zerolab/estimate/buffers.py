"""Communication buckets, ZeRO-3's gathered weights and the framework's fixed overhead,
as the pinned DeepSpeed (0.19.6) allocates them, and the few calibration constants.

Buckets (runtime/zero/stage_1_and_2.py `setup_buckets`, stage3.py `__init__`): stages 1 and 2
allocate reduce_bucket_size elements in the weights' dtype, twice with overlap_comm (once under
pipeline parallelism, where DeepSpeed turns overlap off), whatever the model's size. Stage 1 frees
them only at the gradient-accumulation boundary, so with more than one micro batch per step they
are still there during the next forward passes; stage 2 frees them at the end of every backward
pass. Stage 3 keeps one bucket for good."""

from __future__ import annotations

from zerolab.estimate.model_states import optimizer_kind, weight_bytes
from zerolab.estimate.parts import BACKWARD, FORWARD, STEP, Part, during
from zerolab.estimate.shape import Shape, Stage
from zerolab.recipe.schema import Recipe

CUDA_CONTEXT_GIB = 0.5
"""GPU memory a rank uses outside PyTorch's allocator (CUDA context, cuBLAS and NCCL buffers):
not part of "max allocated", so not in the peak, but counted when checking that a setup fits.
An assumption, not measured by this project: an idle CUDA 12 PyTorch process shows about
0.5 GiB in nvidia-smi on an H100."""

ALLOCATOR_HEADROOM = 0.17
"""PyTorch's caching allocator reserves more than it has allocated (block rounding,
fragmentation): max reserved / max allocated of the most loaded rank in the real logs with
Megatron memory reports (tests/fixtures/logs/real) is 1.09-1.60, median 1.17 (docs/estimate.md
lists them; a test keeps this equal to the median). A setup is `tight` when its peak and the CUDA
context fit but the peak x (1 + this) and the context do not."""

HOST_PROCESS_GIB = 3.2
"""Host memory of one GPU rank before the model is built (Python, PyTorch with the CUDA
libraries, DeepSpeed, Megatron, two data-loader workers and the launcher's share). Not measured
on its own: set from the one host measurement available (GPT-2 124M, ZeRO-3 + CPU offload on
one H100: 5.3 GiB process tree, of which the estimate's offloaded states are 2.1 GiB). The one
other host measurement disagrees: GPT-2 1.5B, ZeRO-2, nothing offloaded, on one H200 measured
2.40 GiB (+33% over-predicted). No single constant fits both within 15% (2.4 GiB would put the
offload run at -15%): either the offloaded states cost ~0.8 GiB more than counted or the process
differs between the runs; open until more runs are measured. Kept at the higher value, so that
a host-memory check errs on the side of caution (docs/estimate.md lists both)."""

CPU_PROCESS_GIB = 0.42
"""The same on the CPU engine (no CUDA libraries): DeepSpeed's "Before Building Model" line in
tests/fixtures/logs/cpu-engine reports 0.42 GB resident per rank."""

FSDP2_CPU_PROCESS_GIB = 0.42
"""The same for the FSDP2 loop on CPU (zerolab.rank.fsdp2_train: no Megatron model code, the engine's
datasets, transformers' GPT-2), with the launcher's share: the mean over the tiny GPT-2 runs of
tests/fixtures/estimate/fsdp2_cpu.csv (benchmarks/fsdp2_memory_cpu.py) of their process tree per rank
less the estimate's few MB of model (a test keeps the two equal); a rank's own RSS before it builds
its model was 0.446 GiB."""

DEEPSPEED_DEFAULTS = {
    "prefetch_bucket_size": 50_000_000,
    "param_persistence_threshold": 100_000,
    "max_live_parameters": 1_000_000_000,
    "max_reuse_distance": 1_000_000_000,
}
"""DeepSpeed's stage-3 defaults for the zero keys a recipe leaves null."""

ALLREDUCE_BUCKET = 500_000_000
"""Elements DeepSpeed flattens at a time to all-reduce gradients without ZeRO
(engine.py MEMORY_OPT_ALLREDUCE_SIZE)."""


def stage3_knob(recipe: Recipe, key: str) -> int:
    """A zero.* stage-3 setting, or DeepSpeed's default when the recipe leaves it null."""
    value = getattr(recipe.zero, key)
    return DEEPSPEED_DEFAULTS[key] if value is None else value


def bucket_parts(recipe: Recipe, shape: Shape) -> list[Part]:
    """The gradient-reduction buckets."""
    zero, w = recipe.zero, weight_bytes(recipe)
    if zero.stage == 0 or (not zero.contiguous_gradients and not zero.offload_optimizer):
        return []
    size = zero.reduce_bucket_size
    if zero.stage == 3:
        return [Part("buckets", "reduce bucket", w * size, f"{size:,} elements x {w} B")]
    pipelined = recipe.parallel.pipeline > 1
    count = 2 if zero.overlap_comm and not pipelined else 1
    if pipelined:
        phases = during(STEP)
    elif zero.stage == 1 and shape.accumulation > 1:
        phases = during(FORWARD, BACKWARD, STEP)
    else:
        phases = during(BACKWARD, STEP) if zero.stage == 1 else during(BACKWARD)
    held = "until the step" if zero.stage == 1 else "during each backward pass"
    return [
        Part(
            "buckets",
            f"reduce buckets ({held})",
            count * w * size,
            f"{count} x {size:,} elements x {w} B",
            phases,
        )
    ]


def gathered_weight_parts(recipe: Recipe, shape: Shape, stage: Stage) -> list[Part]:
    """ZeRO-3's whole weights gathered on the GPU while layers run. With one data-parallel rank and
    the partition on the GPU the partition is the whole weight and nothing more is allocated (as the
    H100 ZeRO-3 run shows). Otherwise: what stays gathered at the turn from forward to backward, at
    most max_live_parameters: the layers within max_reuse_distance / 2 of it, the largest weight
    (the tied embedding, used at both ends) and one prefetch bucket; biases and layer norms below
    param_persistence_threshold stay whole on every rank. Not checked against a measurement."""
    zero = recipe.zero
    if zero.stage != 3 or (shape.zero_ranks == 1 and not zero.offload_param):
        return []
    w = weight_bytes(recipe)
    live = min(
        stage.params,
        stage3_knob(recipe, "max_live_parameters"),
        stage3_knob(recipe, "max_reuse_distance") // 2
        + shape.largest_param()
        + stage3_knob(recipe, "prefetch_bucket_size"),
    )
    parts = [
        Part(
            "gathered_weights",
            "gathered weights (ZeRO-3)",
            w * live,
            f"{live:,} elements x {w} B",
            during(FORWARD, BACKWARD),
        )
    ]
    if stage3_knob(recipe, "param_persistence_threshold") > shape.ffn // shape.tensor:
        small = stage.layers * shape.small_params_per_layer()
        parts.append(
            Part(
                "persistent_weights",
                "persistent small weights (ZeRO-3)",
                w * small,
                f"{small:,} biases and norms x {w} B",
            )
        )
    return parts


def allreduce_parts(recipe: Recipe, shape: Shape, stage: Stage) -> list[Part]:
    """Without ZeRO, data-parallel ranks all-reduce gradients through a flat copy of up to
    ALLREDUCE_BUCKET elements at the step; the ZeRO-1/2 offload path keeps a GPU buffer of the
    largest weight for copying gradients out."""
    w = weight_bytes(recipe)
    if optimizer_kind(recipe) in ("torch", "fp16") and shape.zero_ranks > 1:
        size = min(stage.params, ALLREDUCE_BUCKET)
        return [
            Part(
                "allreduce",
                "all-reduce flat buffer (step)",
                w * size,
                f"{size:,} elements x {w} B",
                during(STEP),
            )
        ]
    if optimizer_kind(recipe) == "zero12" and recipe.zero.offload_optimizer:
        size = shape.largest_param()
        return [
            Part(
                "offload_buffer",
                "gradient copy-out buffer",
                w * size,
                f"{size:,} elements x {w} B",
                during(BACKWARD, STEP),
            )
        ]
    return []
