"""What one training step moves, per rank, counted as the ZeRO paper counts it (Rajbhandari et
al. 2020, section 7): a data-parallel all-reduce of Psi gradients is a reduce-scatter plus an
all-gather, 2*Psi; stages 1 and 2 keep that volume (reduce-scatter gradients, all-gather updated
weights); stage 3 all-gathers the weights for the forward and again for the backward pass and
reduce-scatters gradients, 3*Psi. DeepSpeed repeats the per-micro-batch parts for every micro
batch of a step: stage 2 reduce-scatters after each backward pass, stage 3 gathers for each.
Bytes are what each rank sends on a ring: (N-1)/N of the collective's size for reduce-scatter and
all-gather, twice that for all-reduce. Tensor-parallel all-reduces (Megatron: two per layer in
the forward pass, two in the backward, two more when full recompute reruns the forward),
pipeline sends, and host transfers under offload are counted the same way. The FSDP2 loop's
collectives: DDP all-reduces fp32 gradients after every micro batch's backward; fully_shard
all-gathers weights in the compute dtype for every micro batch (once with reshard_after_forward
False, again for the backward with True, but for the root, which stays gathered) and reduce-scatters
fp32 gradients after each; CPUOffloadPolicy copies the fp32 shard to the GPU for each gather and the
gradient shard back."""

from __future__ import annotations

from dataclasses import dataclass, replace

from zerolab.estimate.fsdp2_states import FP32, compute_bytes
from zerolab.estimate.model_states import optimizer_kind, weight_bytes
from zerolab.estimate.shape import Shape, Stage
from zerolab.recipe.fsdp2 import fsdp2_setup
from zerolab.recipe.schema import Recipe

NVLINK_GBPS = 3600.0
"""NVLink 4 (H100 SXM): 450 GB/s each way, nominal."""

PCIE_GBPS = 512.0
"""PCIe Gen5 x16: 64 GB/s each way, nominal (the host link of an H100)."""


@dataclass(frozen=True)
class Traffic:
    """Bytes one rank sends per training step, by kind."""

    all_reduce: float = 0.0
    reduce_scatter: float = 0.0
    all_gather: float = 0.0
    tensor_parallel: float = 0.0
    pipeline: float = 0.0
    to_host: float = 0.0
    from_host: float = 0.0

    @property
    def between_gpus(self) -> float:
        """Bytes over the GPU-to-GPU link."""
        return self.all_reduce + self.reduce_scatter + self.all_gather + self.tensor_parallel + self.pipeline

    @property
    def host(self) -> float:
        """Bytes over the host link (both directions)."""
        return self.to_host + self.from_host

    def seconds(self, link_gbps: float, host_gbps: float = PCIE_GBPS) -> float:
        """Time to move it at these link rates (Gb/s each way), one transfer after another."""
        return self.between_gpus * 8 / (link_gbps * 1e9) + self.host * 8 / (host_gbps * 1e9)


def ring(size: float, ranks: int) -> float:
    """What each of `ranks` ranks sends in a ring reduce-scatter or all-gather of `size` bytes."""
    return size * (ranks - 1) / ranks if ranks > 1 else 0.0


def step_traffic(recipe: Recipe, shape: Shape, stage: Stage) -> Traffic:
    """Per-step traffic of one rank of `stage`."""
    if recipe.engine == "fsdp2":
        return fsdp2_step_traffic(recipe, shape, stage)
    zero, w = recipe.zero, weight_bytes(recipe)
    n, micro_batches = shape.zero_ranks, shape.accumulation
    weights = w * stage.params
    gradients = w * stage.params
    kind = optimizer_kind(recipe)
    all_reduce = reduce_scatter = all_gather = 0.0
    if kind in ("torch", "fp16"):
        all_reduce = 2 * ring(gradients, n)
    elif kind == "bf16":
        all_reduce, all_gather = 2 * ring(gradients, n), ring(weights, n)
    elif zero.stage == 1:
        reduce_scatter, all_gather = ring(gradients, n), ring(weights, n)
    elif zero.stage == 2:
        reduce_scatter, all_gather = micro_batches * ring(gradients, n), ring(weights, n)
    else:
        reduce_scatter, all_gather = zero3_collectives(recipe, shape, weights, gradients)
        if shape.mics_shard:  # MiCS: the shards' gradient partitions all-reduced across their replicas
            all_reduce = 2 * ring(gradients / n, shape.reduce_ranks // n)
    activation = w * shape.tokens * shape.hidden
    tensor_parallel = pipeline = 0.0
    if shape.tensor > 1:
        per_layer = 4 + (2 if recipe.activation_checkpointing.granularity == "full" else 0)
        count = per_layer * stage.layers + int(stage.first) + int(stage.last)
        tensor_parallel = micro_batches * count * 2 * ring(activation, shape.tensor)
    if shape.pipeline > 1:
        sends = int(not stage.last) + int(not stage.first)
        pipeline = micro_batches * sends * activation / shape.tensor
    to_host = from_host = 0.0
    shard = stage.params / n
    if zero.offload_optimizer:
        to_host = w * shard * (1 if zero.stage == 1 else micro_batches)
        from_host = w * shard
    if zero.offload_param:
        from_host += micro_batches * 2 * w * shard
    ckpt = recipe.activation_checkpointing
    if ckpt.granularity == "full" and ckpt.cpu_checkpointing:
        checkpoints = stage.layers // (ckpt.num_layers or 1) * activation
        checkpoints //= shape.tensor if ckpt.partition_activations else 1
        to_host += micro_batches * checkpoints
        from_host += micro_batches * checkpoints
    return Traffic(all_reduce, reduce_scatter, all_gather, tensor_parallel, pipeline, to_host, from_host)


def zero3_collectives(recipe: Recipe, shape: Shape, weights: float, gradients: float) -> tuple[float, float]:
    """Stage 3's (reduce-scatter, all-gather) bytes a step: gradients reduce-scattered and weights
    gathered for the forward and again for the backward pass of every micro batch, over the partition
    (all ranks, or MiCS's shard); ZeRO++'s hpZ gathers the backward's from its secondary partition
    within a node, qwZ gathers int8 weights (1 byte a weight) and qgZ reduces int4 gradients (half a
    byte a weight; the ZeRO++ paper's cross-node bytes, its intra-node step left out)."""
    zero, n, micro_batches = recipe.zero, shape.zero_ranks, shape.accumulation
    psi = weights / weight_bytes(recipe)
    gathered = psi * QWZ_BYTES if zero.quantized_weights else weights
    reduced = psi * QGZ_BYTES if zero.quantized_gradients else gradients
    hpz = zero.hpz_partition_size or 1
    backward = ring(gathered, hpz) if hpz > 1 else ring(gathered, n)
    return micro_batches * ring(reduced, n), micro_batches * (ring(gathered, n) + backward)


QWZ_BYTES, QGZ_BYTES = 1.0, 0.5
"""Bytes a weight ZeRO++ sends quantized: qwZ's int8 weights, qgZ's int4 gradients."""


def fsdp2_step_traffic(recipe: Recipe, shape: Shape, stage: Stage) -> Traffic:
    """Per-step traffic of one rank of the FSDP2 loop (data parallel only)."""
    setup, n, micro_batches = fsdp2_setup(recipe), shape.zero_ranks, shape.accumulation
    gradients = FP32 * stage.params
    if setup.sharding == "ddp":
        return Traffic(all_reduce=micro_batches * 2 * ring(gradients, n))
    gathered = float(stage.params)
    if setup.reshard_after_forward:
        gathered += stage.layers * shape.layer_params()
    all_gather = micro_batches * ring(compute_bytes(recipe) * gathered, n)
    reduce_scatter = micro_batches * ring(gradients, n)
    if not setup.cpu_offload:
        return Traffic(reduce_scatter=reduce_scatter, all_gather=all_gather)
    return Traffic(
        reduce_scatter=reduce_scatter,
        all_gather=all_gather,
        to_host=micro_batches * gradients / n,
        from_host=micro_batches * FP32 * gathered / n,
    )


def with_data_parallel(recipe: Recipe, shape: Shape, data: int) -> Shape | None:
    """The shape with `data` data-parallel ranks at the same global and micro batch, or None when
    the global batch does not divide into micro batch x data."""
    per_step = shape.micro_batch * data
    if recipe.train.global_batch_size % per_step:
        return None
    return replace(shape, data=data, accumulation=recipe.train.global_batch_size // per_step)
