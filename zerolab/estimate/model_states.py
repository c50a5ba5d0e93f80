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
    psi, n, w = stage.params, shape.data, weight_bytes(recipe)
    kind = optimizer_kind(recipe)
    zero = recipe.zero
    accumulated = gradients_in_forward(shape)
    shard = f"{psi:,} weights / N={n}"
    if kind == "torch":
        return [
            Part("weights", "weights (fp32)", 4 * psi, f"{psi:,} weights x 4 B"),
            Part("gradients", "gradients (fp32)", 4 * psi, f"{psi:,} x 4 B", accumulated),
            Part("optimizer_states", "Adam moments (fp32)", ADAM_BYTES * psi, f"{psi:,} x 8 B"),
        ]
    if kind in ("fp16", "bf16"):
        parts = [
            Part("weights", f"weights ({recipe.precision_name})", w * psi, f"{psi:,} weights x {w} B"),
            Part(
                "gradients", f"gradients ({recipe.precision_name})", w * psi, f"{psi:,} x {w} B", accumulated
            ),
        ]
        divisor, label = (n, shard) if kind == "bf16" else (1, f"{psi:,} weights")
        parts += [
            Part("master_weights", "fp32 master weights", MASTER_BYTES * psi / divisor, f"{label} x 4 B"),
            Part("optimizer_states", "Adam moments (fp32)", ADAM_BYTES * psi / divisor, f"{label} x 8 B"),
        ]
        return parts
    offload = zero.offload_optimizer
    where = " (host)" if offload else ""
    states = [
        Part(
            "master_weights",
            f"fp32 master weights{where}",
            MASTER_BYTES * psi / n,
            f"{shard} x 4 B",
            host=offload,
        ),
        Part(
            "optimizer_states", f"Adam moments{where}", ADAM_BYTES * psi / n, f"{shard} x 8 B", host=offload
        ),
    ]
    if kind == "zero12":
        weights = Part("weights", f"weights ({recipe.precision_name})", w * psi, f"{psi:,} weights x {w} B")
        if zero.stage == 1:
            gradients = Part(
                "gradients", "gradients (all, until the step)", w * psi, f"{psi:,} x {w} B", accumulated
            )
        else:
            gradients = Part(
                "gradients",
                "accumulated gradient partition",
                w * psi / n,
                f"{shard} x {w} B",
                accumulated if not offload else during(BACKWARD),
            )
        parts = [weights, gradients, *states]
        if offload:
            parts.append(
                Part(
                    "offload_gradients",
                    "fp32 gradient partition (host)",
                    MASTER_BYTES * psi / n,
                    f"{shard} x 4 B",
                    host=True,
                )
            )
        return parts
    weights_on_host = zero.offload_param
    parts = [
        Part(
            "weights",
            f"weight partition ({recipe.precision_name}){' (host)' if weights_on_host else ''}",
            w * psi / n,
            f"{shard} x {w} B",
            host=weights_on_host,
        ),
        Part("gradients", f"gradient partition{where}", w * psi / n, f"{shard} x {w} B", host=offload),
        *states,
    ]
    if offload:
        parts.append(
            Part(
                "offload_gradients",
                "fp32 gradient partition (host)",
                MASTER_BYTES * psi / n,
                f"{shard} x 4 B",
                host=True,
            )
        )
    return parts


def step_temporary_parts(recipe: Recipe, shape: Shape, stage: Stage) -> list[Part]:
    """What the optimizer step allocates for itself on the GPU and frees again.

    FP16_Optimizer builds a flat fp32 copy of all gradients from a list of per-tensor fp32 copies
    (8 B per weight at once); the ZeRO optimizers convert the gradient partition to fp32 (4 B per
    weight / N) and stage 1 and 2 flatten it once more in the gradients' dtype."""
    psi, n, w = stage.params, shape.data, weight_bytes(recipe)
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
