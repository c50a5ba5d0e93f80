"""Model states per rank: weights, gradients, fp32 master weights and Adam's two moments,
partitioned as the ZeRO stage says (Rajbhandari et al. 2020, "ZeRO: Memory Optimizations
Toward Training Trillion Parameter Models", section 3: 2+2+12 bytes per parameter in mixed
precision; stage 1 divides the 12 by the data-parallel size N, stage 2 also the gradients'
2, stage 3 everything). Which DeepSpeed optimizer holds them follows the pinned DeepSpeed
(0.19.6, engine.py `_do_optimizer_sanity_check`): gradients accumulate in the model's dtype."""

from __future__ import annotations

from zerolab.estimate.parts import BACKWARD, FORWARD, STEP, Part, during
from zerolab.estimate.shape import Shape, Stage
from zerolab.recipe.schema import Recipe

MASTER_BYTES = 4
ADAM_BYTES = 8


def weight_bytes(recipe: Recipe) -> int:
    """Bytes of one weight (and one gradient): 2 in bf16/fp16, 4 in fp32."""
    return 4 if recipe.precision_name == "fp32" else 2


def optimizer_kind(recipe: Recipe) -> str:
    """The DeepSpeed optimizer that holds the states: `torch` (fp32 without ZeRO: Megatron's Adam
    as is), `fp16` (FP16_Optimizer: 16-bit without ZeRO), `bf16` (BF16_Optimizer: bf16 without ZeRO
    under pipeline parallelism), `zero12` (DeepSpeedZeroOptimizer) or `zero3`."""
    stage = recipe.zero.stage
    if stage == 3:
        return "zero3"
    if stage in (1, 2):
        return "zero12"
    if recipe.precision_name == "fp32":
        return "torch"
    return "bf16" if recipe.precision.bf16 and recipe.parallel.pipeline > 1 else "fp16"


def gradients_in_forward(shape: Shape) -> frozenset[str]:
    """Accumulated gradients exist in the forward pass from the second micro batch on."""
    return during(FORWARD, BACKWARD, STEP) if shape.accumulation > 1 else during(BACKWARD, STEP)


def model_state_parts(recipe: Recipe, shape: Shape, stage: Stage) -> list[Part]:
    """Weights, gradients, master weights and optimizer states of one rank of `stage`."""
    kind = optimizer_kind(recipe)
    if kind in ("torch", "fp16", "bf16"):
        return _without_zero(recipe, shape, stage, kind)
    return _zero(recipe, shape, stage)


def _without_zero(recipe: Recipe, shape: Shape, stage: Stage, kind: str) -> list[Part]:
    """fp32: Megatron's Adam holds weights, gradients and moments itself. 16-bit: DeepSpeed's
    FP16_Optimizer adds whole fp32 master weights; its BF16_Optimizer (pipelines) divides the
    master weights and moments among data-parallel ranks."""
    psi, n, w = stage.params, shape.zero_ranks, weight_bytes(recipe)
    dtype = recipe.precision_name
    parts = [
        Part("weights", f"weights ({dtype})", w * psi, f"{psi:,} weights x {w} B"),
        Part("gradients", f"gradients ({dtype})", w * psi, f"{psi:,} x {w} B", gradients_in_forward(shape)),
    ]
    if kind == "torch":
        return [*parts, Part("optimizer_states", "Adam moments", ADAM_BYTES * psi, f"{psi:,} x 8 B")]
    divisor, label = (n, f"{psi:,} weights / N={n}") if kind == "bf16" else (1, f"{psi:,} weights")
    return [
        *parts,
        Part("master_weights", "fp32 master weights", MASTER_BYTES * psi / divisor, f"{label} x 4 B"),
        Part("optimizer_states", "Adam moments", ADAM_BYTES * psi / divisor, f"{label} x 8 B"),
    ]


def _zero(recipe: Recipe, shape: Shape, stage: Stage) -> list[Part]:
    """ZeRO 1-3: master weights and moments divided among data-parallel ranks (on the host with
    offload), gradients whole (stage 1) or divided (2, 3), weights divided at stage 3 (on the host
    with weight offload). Offload adds an fp32 gradient partition on the host."""
    zero, psi, n, w = recipe.zero, stage.params, shape.zero_ranks, weight_bytes(recipe)
    dtype, shard = recipe.precision_name, f"{psi:,} weights / N={n}"
    offload = zero.offload_optimizer
    pinned = ", pinned" if zero.pin_memory else ""
    host = " (host)" if offload else ""
    accumulated = gradients_in_forward(shape)
    if zero.stage == 1:
        weights = Part("weights", f"weights ({dtype})", w * psi, f"{psi:,} weights x {w} B")
        gradients = Part(
            "gradients", "gradients (all, until the step)", w * psi, f"{psi:,} x {w} B", accumulated
        )
    elif zero.stage == 2:
        weights = Part("weights", f"weights ({dtype})", w * psi, f"{psi:,} weights x {w} B")
        phases = during(BACKWARD) if offload else accumulated
        gradients = Part(
            "gradients", "accumulated gradient partition", w * psi / n, f"{shard} x {w} B", phases
        )
    else:
        on_host = f" (host{pinned})" if zero.offload_param else ""
        weights = Part(
            "weights",
            f"weight partition ({dtype}){on_host}",
            w * psi / n,
            f"{shard} x {w} B",
            host=zero.offload_param,
        )
        gradients = Part(
            "gradients",
            f"gradient partition{' (host' + pinned + ')' if offload else ''}",
            w * psi / n,
            f"{shard} x {w} B",
            host=offload,
        )
    parts = [
        weights,
        gradients,
        Part(
            "master_weights",
            f"fp32 master weights{host}",
            MASTER_BYTES * psi / n,
            f"{shard} x 4 B",
            host=offload,
        ),
        Part("optimizer_states", f"Adam moments{host}", ADAM_BYTES * psi / n, f"{shard} x 8 B", host=offload),
    ]
    if offload:
        parts.append(
            Part(
                "offload_gradients",
                f"fp32 gradient partition (host{pinned})",
                MASTER_BYTES * psi / n,
                f"{shard} x 4 B",
                host=True,
            )
        )
    hpz = zero.hpz_partition_size or 1
    if zero.stage == 3 and hpz > 1:
        parts.append(
            Part(
                "hpz_partition",
                "hpZ's secondary weight partition",
                w * psi / hpz,
                f"{psi:,} weights / hpZ={hpz} x {w} B, kept from the forward pass for the backward's gathers",
            )
        )
    return parts


def step_temporary_parts(recipe: Recipe, shape: Shape, stage: Stage) -> list[Part]:
    """What the optimizer step allocates for itself on the GPU and frees again.

    FP16_Optimizer builds a flat fp32 copy of all gradients from a list of per-tensor fp32 copies
    (8 B per weight at once); the ZeRO optimizers convert the gradient partition to fp32 (4 B per
    weight / N) and stage 1 and 2 flatten it once more in the gradients' dtype."""
    psi, n, w = stage.params, shape.zero_ranks, weight_bytes(recipe)
    kind = optimizer_kind(recipe)
    offload = recipe.zero.offload_optimizer
    if kind == "fp16":
        return [Part("step", "fp32 gradient copies (step)", 8 * psi, f"{psi:,} x (4 + 4) B", during(STEP))]
    if kind == "bf16":
        return [
            Part("step", "fp32 gradient partition (step)", 4 * psi / n, f"{psi:,} / N x 4 B", during(STEP))
        ]
    if kind == "zero12" and not offload:
        return [
            Part(
                "step",
                "flat and fp32 gradient partition (step)",
                (w + 4) * psi / n,
                f"{psi:,} / N={n} x ({w} + 4) B",
                during(STEP),
            )
        ]
    if kind == "zero3" and not offload:
        return [
            Part(
                "step", "fp32 gradient partition (step)", 4 * psi / n, f"{psi:,} / N={n} x 4 B", during(STEP)
            )
        ]
    return []
