"""Model states and gathered weights per rank of the second engine (engine fsdp2, zerolab.rank.fsdp2_train),
as PyTorch 2.13 allocates them. The FSDP2 loop keeps fp32 weights whatever the precision (bf16 is a
MixedPrecisionPolicy or autocast), so every state is 4 bytes a weight and Adam's moments 8.

DDP (zero.stage 0): whole weights, gradients and moments, and the reducer's gradient buckets, which it
allocates for every weight when it wraps the model (gradient_as_bucket_view is off). Under bf16,
autocast's bf16 copies of the weights are saved for the backward pass.

fully_shard: the fp32 shards of weights, gradients and moments (on the host with CPUOffloadPolicy);
the unsharded weights in the compute dtype while layers run: all of them from the forward pass to
their backward with reshard_after_forward=False (z1, z2), else the root's (embeddings, tied head:
FSDP2 never reshards the root after forward) and two blocks' (the running one and the prefetched
one); in the backward pass one block's unsharded gradients and its fp32 reduce-scatter input, and
the tied embedding's gradient from the head to the embedding. The optimizer step's foreach
intermediates take one more fp32 copy of a parameter group."""

from __future__ import annotations

from zerolab.estimate.parts import BACKWARD, FORWARD, STEP, Part, during
from zerolab.estimate.shape import Shape, Stage
from zerolab.recipe.fsdp2 import fsdp2_setup
from zerolab.recipe.schema import Recipe

FP32 = 4
ADAM_BYTES = 8


def compute_bytes(recipe: Recipe) -> int:
    """Bytes of a weight as layers compute with it: 2 under bf16, else 4."""
    return 2 if recipe.precision_name == "bf16" else FP32


def fsdp2_state_parts(recipe: Recipe, shape: Shape, stage: Stage) -> list[Part]:
    """Everything of the FSDP2 loop's rank but activations."""
    if fsdp2_setup(recipe).sharding == "ddp":
        return _ddp(recipe, shape, stage)
    return _fully_shard(recipe, shape, stage)


def _gradient_phases(shape: Shape) -> frozenset[str]:
    """Gradients live from the backward pass to the step (set to None after it), and through the next
    micro batches' forward passes when a step has several."""
    return during(FORWARD, BACKWARD, STEP) if shape.accumulation > 1 else during(BACKWARD, STEP)


def _ddp(recipe: Recipe, shape: Shape, stage: Stage) -> list[Part]:
    psi = stage.params
    whole = f"{psi:,} weights x 4 B"
    parts = [
        Part("weights", "weights (fp32)", FP32 * psi, whole),
        Part("gradients", "gradients (fp32)", FP32 * psi, whole, _gradient_phases(shape)),
        Part(
            "buckets",
            "DDP gradient buckets (fp32)",
            FP32 * psi,
            f"{whole}, allocated when DDP wraps the model",
        ),
        Part("optimizer_states", "AdamW moments", ADAM_BYTES * psi, f"{psi:,} x 8 B"),
        Part("step", "AdamW foreach intermediates (step)", FP32 * psi, whole, during(STEP)),
    ]
    if recipe.precision_name == "bf16":
        parts.append(
            Part(
                "gathered_weights",
                "autocast's bf16 weight copies",
                2 * psi,
                f"{psi:,} x 2 B, saved for the backward pass",
                during(FORWARD, BACKWARD),
            )
        )
    return parts


def _fully_shard(recipe: Recipe, shape: Shape, stage: Stage) -> list[Part]:
    setup = fsdp2_setup(recipe)
    psi, n, c = stage.params, shape.zero_ranks, compute_bytes(recipe)
    shard, host = f"{psi:,} weights / N={n}", setup.cpu_offload
    where = " (host)" if host else ""
    layer, root = shape.layer_params(), psi - stage.layers * shape.layer_params()
    if setup.reshard_after_forward:
        live = root + min(2, stage.layers) * layer
        gathered_how = f"the root's {root:,} weights and 2 blocks of {layer:,}, x {c} B"
    else:
        live = psi
        gathered_how = f"{psi:,} weights x {c} B, kept from the forward pass to each layer's backward"
    parts = [
        Part("weights", f"weight shard (fp32){where}", FP32 * psi / n, f"{shard} x 4 B", host=host),
        Part(
            "gradients",
            f"gradient shard (fp32){where}",
            FP32 * psi / n,
            f"{shard} x 4 B",
            _gradient_phases(shape),
            host=host,
        ),
        Part("optimizer_states", f"AdamW moments{where}", ADAM_BYTES * psi / n, f"{shard} x 8 B", host=host),
        Part("gathered_weights", "unsharded weights", c * live, gathered_how, during(FORWARD, BACKWARD)),
        Part(
            "unsharded_gradients",
            "unsharded gradients (backward)",
            (c + FP32) * layer + c * (root - 2 * shape.hidden),
            f"one block's {layer:,} x ({c} + 4) B and the tied embedding's x {c} B",
            during(BACKWARD),
        ),
    ]
    parts.append(
        Part(
            "step",
            f"AdamW foreach intermediates (step){where}",
            FP32 * psi / n,
            f"{shard} x 4 B",
            during(STEP),
            host,
        )
    )
    return parts
