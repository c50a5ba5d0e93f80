"""The recipe schema: the single source of truth for every key, its type, default, unit
and meaning. docs/recipe-reference.md is generated from it (`make docs`)."""

from __future__ import annotations

import os
import re
import typing
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, create_model, field_validator

from zerolab.contracts import (
    ATTENTION_ENV,
    FLASH_V2,
    GLUE_TASKS,
    HOST_HUGE_PAGES_ENV,
    SDPA,
    SPEED_ENV,
    SWITCHES,
)
from zerolab.recipe.destinations import DeepSpeed, Destination, Env, Launcher, Megatron, Zerolab
from zerolab.recipe.megatron_split import SPLIT_PATTERN

MAX_LAYERS, MAX_HIDDEN, MAX_HEADS = 1024, 65536, 1024
MAX_POSITIONS, MAX_VOCAB, MAX_BATCH = 2**20, 2**24, 2**24
"""Ceilings on sizes, far above any model trained (GPT-3 175B: 96 layers, hidden 12288, 96 heads,
a batch of 1536 sequences), so that a typo is refused by name before the engine allocates it."""


def field(
    default: Any,
    doc: str,
    unit: str | None = None,
    *,
    to: tuple[Destination, ...] = (),
    names_run: bool = True,
    **constraints: Any,
) -> Any:
    """A schema field with its one-line doc, its unit where it has one, and where it goes (`to`:
    zerolab.recipe.destinations). `names_run=False`: an override of it says where the run reads
    or reports, not what it measures, and stays out of the run name (zerolab.recipe.naming)."""
    extra: dict[str, Any] = ({"unit": unit} if unit else {}) | ({} if names_run else {"names_run": False})
    extra = extra or None
    if isinstance(default, type):
        info = Field(default_factory=default, description=doc, json_schema_extra=extra)
    else:
        info = Field(default, description=doc, json_schema_extra=extra, **constraints)
    info.metadata.extend(to)
    return info


class Section(BaseModel):
    """A recipe section: unknown keys are errors, values are checked on assignment."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class ModelSection(Section):
    """The GPT-2 shape (configs/model/)."""

    name: str = field(
        "gpt2-124m",
        "name of the model shape, as reported in run.json; each shape key that differs from the block "
        "configs/model/NAME.yaml is added to it (gpt2-tiny+num_layers=4)",
        to=(Zerolab("run.json, summaries"),),
    )
    num_layers: int = field(
        12, "transformer layers", "layers", gt=0, le=MAX_LAYERS, to=(Megatron("--num-layers"),)
    )
    hidden_size: int = field(
        768, "hidden size", "elements", gt=0, le=MAX_HIDDEN, to=(Megatron("--hidden-size"),)
    )
    num_attention_heads: int = field(
        12,
        "attention heads; must divide hidden_size",
        "heads",
        gt=0,
        le=MAX_HEADS,
        to=(Megatron("--num-attention-heads"),),
    )
    seq_length: int = field(
        1024, "training sequence length", "tokens", gt=0, le=MAX_POSITIONS, to=(Megatron("--seq-length"),)
    )
    max_position_embeddings: int = field(
        1024,
        "learned position embeddings; at least seq_length",
        "positions",
        gt=0,
        le=MAX_POSITIONS,
        to=(Megatron("--max-position-embeddings"),),
    )
    vocab_size: int = field(
        50257,
        "tokenizer vocabulary before padding (GPT-2 BPE: 50257)",
        "tokens",
        gt=0,
        le=MAX_VOCAB,
        to=(Zerolab("padded vocabulary for FLOPs, MFU and estimates; the tokenizer sets the engine's"),),
    )
    make_vocab_size_divisible_by: int = field(
        128,
        "Megatron pads the vocabulary to a multiple of this x tensor parallel size",
        "tokens",
        gt=0,
        to=(Megatron("--make-vocab-size-divisible-by"),),
    )
    attention_dropout: float = field(
        0.1,
        "dropout on attention probabilities",
        "probability",
        ge=0,
        lt=1,
        to=(Megatron("--attention-dropout"),),
    )
    hidden_dropout: float = field(
        0.1, "dropout on hidden states", "probability", ge=0, lt=1, to=(Megatron("--hidden-dropout"),)
    )
    init_method_std: float = field(
        0.02, "standard deviation of the weight initialisation", gt=0, to=(Megatron("--init-method-std"),)
    )
    attention: Literal["megatron", "sdpa", "flash", "flash-v1", "flash-triton"] = field(
        "megatron",
        "how attention is computed, the same function each way. megatron: the engine's CoreAttention "
        "(a seq x seq score matrix per head, stored for the backward pass); sdpa: PyTorch's "
        "scaled_dot_product_attention (fused flash/memory-efficient kernels on GPU; any device, any "
        "precision), zerolab's patch sdpa_attention, enabled at launch by ZEROLAB_ATTENTION=sdpa; "
        f"flash: the engine's FlashAttention-2 path ({FLASH_V2}); flash-v1 and flash-triton: its "
        "FlashAttention-1 and Triton paths (--use-flash-attn-v1, --use-flash-attn-triton), as upstream's "
        "scripts use them. The flash paths: CUDA, bf16 or fp16, and the flash_attn package (flash-triton: "
        "its Triton kernel) in the engine's environment; pretraining only",
        to=(
            Megatron(FLASH_V2, "flash"),
            Megatron("--use-flash-attn-v1", "flash-v1"),
            Megatron("--use-flash-attn-triton", "flash-triton"),
            Env(ATTENTION_ENV, SDPA),
        ),
    )
    masked_softmax_fusion: bool = field(
        True,
        "the engine's fused CUDA kernels for the scaled, masked softmax of attention (Megatron's "
        "default); false renders --no-masked-softmax-fusion (PyTorch's softmax, the same function), as "
        "curriculum_learning/ds_train.sh does. zerolab renders that flag on CPU and wherever "
        "model.attention is not megatron whatever this key says: nothing there calls the kernels, and "
        "none is built",
        to=(Megatron("--no-masked-softmax-fusion", "when false, on CPU, or when attention is not megatron"),),
    )
    rotary: bool = field(
        False,
        "rotary position embeddings on queries and keys (Megatron --use-rotary-position-embeddings), "
        "besides the learned positions as upstream's rope scripts train",
        to=(Megatron("--use-rotary-position-embeddings"),),
    )
    rotary_percent: float | None = field(
        None,
        "with model.rotary: the fraction of each head's dimensions rotated (Megatron --rotary-percent; "
        "upstream's rope scripts rotate 0.25); null: Megatron's 1.0, the whole head",
        "fraction",
        gt=0,
        le=1,
        to=(Megatron("--rotary-percent"),),
    )
    rotary_theta: int | None = field(
        None,
        "with model.rotary: the base of the rotary frequencies (Megatron "
        "--rotary-position-embeddings-theta; long-context scripts raise it); null: Megatron's 10000",
        gt=0,
        to=(Megatron("--rotary-position-embeddings-theta"),),
    )
    init_from: str | None = field(
        None,
        "start from imported weights: a folder written by `zerolab import MODEL --out DIR` (a Hugging Face "
        "GPT-2 as the engine's checkpoints), its layout parallel.tensor x parallel.pipeline; the engine "
        "loads the weights only (a fresh optimizer, schedule and iteration count). The shape keys, "
        "make_vocab_size_divisible_by and the tokenizer must be the weights'; checked before launch. "
        "null: random initialisation",
        "path",
        to=(
            Megatron("--load", "the folder, with --load-tag tpT_ppP and --finetune"),
            Zerolab("run.json's init_from"),
        ),
        names_run=False,
    )
    import_command: str | None = field(
        None,
        "the command that writes the folder of model.init_from, shown when it is missing; null: "
        "`zerolab import MODEL --out FOLDER`",
        to=(Zerolab("the hint when the weights are missing"),),
        names_run=False,
    )


def padded_vocab(vocab_size: int, divisible_by: int, tensor: int) -> int:
    """The vocabulary as Megatron pads it: up to a multiple of divisible-by x tensor parallel."""
    multiple = divisible_by * tensor
    return -(-vocab_size // multiple) * multiple


MODEL_SHAPE_KEYS = (
    "num_layers",
    "hidden_size",
    "num_attention_heads",
    "max_position_embeddings",
    "vocab_size",
)
"""The model keys that set its weights' shapes: a model with other values is another model (its
name says so, and a checkpoint of it cannot be resumed with them changed)."""


class ParallelSection(Section):
    """Model and sequence parallelism; data parallelism is what is left of the world size."""

    tensor: int = field(
        1,
        "tensor-parallel size (Megatron --tensor-model-parallel-size)",
        "ranks",
        gt=0,
        to=(Megatron("--tensor-model-parallel-size"),),
    )
    pipeline: int = field(
        1,
        "pipeline-parallel size (Megatron --pipeline-model-parallel-size)",
        "ranks",
        gt=0,
        to=(
            Megatron("--pipeline-model-parallel-size"),
            Megatron("--no-pipeline-parallel", "when 1"),
        ),
    )
    sequence: int = field(
        1,
        "DeepSpeed-Ulysses sequence parallelism (Megatron-DeepSpeed --ds-sequence-parallel-size): each "
        "sequence is split across this many ranks, which trade attention heads all-to-all so that each "
        "attends over the whole sequence with heads / sequence of the heads; data parallel = world / "
        "(tensor x pipeline x sequence), and ZeRO partitions over sequence x data parallel ranks. Must "
        "divide model.seq_length and the attention heads of a tensor rank",
        "ranks",
        gt=0,
        to=(Megatron("--ds-sequence-parallel-size", "when above 1"),),
    )
    sequence_fpdt: bool = field(
        False,
        "FPDT (Fully Pipelined Distributed Transformer) over the sequence-parallel ranks: attention and "
        "MLP computed in chunks of sequence_fpdt_chunk_size tokens, as upstream's 6.7B 32k script runs "
        "(--ds-sequence-parallel-fpdt). CUDA only: its attention calls the flash_attn package's kernels "
        "(DeepSpeed's sequence/fpdt_layer.py). The estimate does not model it",
        to=(Megatron("--ds-sequence-parallel-fpdt"),),
    )
    sequence_fpdt_chunk_size: int | None = field(
        None,
        "with sequence_fpdt: the tokens of one FPDT chunk (--ds-sequence-parallel-fpdt-chunk-size); null: "
        "Megatron's 65536",
        "tokens",
        gt=0,
        to=(Megatron("--ds-sequence-parallel-fpdt-chunk-size"),),
    )
    sequence_fpdt_offloading: bool = field(
        False,
        "with sequence_fpdt: the chunks' activations kept in host memory between the passes "
        "(--ds-sequence-parallel-fpdt-offloading)",
        to=(Megatron("--ds-sequence-parallel-fpdt-offloading"),),
    )


class ZeroSection(Section):
    """The ZeRO setup (configs/zero/), rendered into the ds_config and --zero-stage."""

    stage: Literal[0, 1, 2, 3] = field(
        0,
        "ZeRO stage: 0 off, 1 optimizer states, 2 + gradients, 3 + weights",
        to=(
            Megatron("--zero-stage"),
            DeepSpeed("zero_optimization.stage"),
        ),
    )
    offload_optimizer: bool = field(
        False,
        "keep optimizer states and step on the CPU (DeepSpeed CPU Adam); needs stage >= 1",
        to=(
            DeepSpeed("zero_optimization.offload_optimizer", rule="device cpu"),
            Megatron("--cpu-optimizer", "when true"),
        ),
    )
    offload_ratio: float | None = field(
        None,
        "with offload_optimizer at stage 3: the fraction of the optimizer's sub-groups updated by CPU "
        "Adam on the CPU, the rest by torch's AdamW on the GPU (ZeRO-Offload++ Twin-Flow; upstream's "
        "offload_pp scripts set 0.3); DeepSpeed splits by zero_optimization.sub_group_size's groups, so "
        "a model of one group offloads all of it. On CPU every group steps there. null: DeepSpeed's 1.0, "
        "all on the CPU",
        "fraction",
        ge=0,
        le=1,
        to=(DeepSpeed("zero_optimization.offload_optimizer.ratio", rule="with offload_optimizer"),),
    )
    pin_memory: bool = field(
        True,
        "page-locked host memory for what is offloaded (optimizer states, weights)",
        to=(
            DeepSpeed("zero_optimization.offload_*.pin_memory", rule="with an offload"),
            Megatron("--use-pin-memory", "with offload_param"),
        ),
    )
    overlap_comm: bool = field(
        True,
        "overlap gradient reduction with the backward pass. Upstream default: DeepSpeed's is false at "
        "stages 1-2 (true at 3); zerolab's true overlaps there too, for speed (the same arithmetic); a "
        "ported launch keeps its own (`zerolab from-command` names it)",
        to=(DeepSpeed("zero_optimization.overlap_comm", stages=(1, 2, 3)),),
    )
    contiguous_gradients: bool = field(
        True,
        "copy gradients into one contiguous buffer as they are made",
        to=(DeepSpeed("zero_optimization.contiguous_gradients", stages=(1, 2, 3)),),
    )
    reduce_bucket_size: int = field(
        500_000_000,
        "elements reduced at a time",
        "elements",
        gt=0,
        to=(DeepSpeed("zero_optimization.reduce_bucket_size", stages=(1, 2, 3)),),
    )
    allgather_bucket_size: int = field(
        500_000_000,
        "elements gathered at a time; rendered at stages 1 and 2 only (stage 3 gathers by "
        "prefetch_bucket_size)",
        "elements",
        gt=0,
        to=(DeepSpeed("zero_optimization.allgather_bucket_size", stages=(1, 2)),),
    )
    offload_param: bool = field(
        False,
        "stage 3 only: keep the partitioned weights on the CPU too (ds_config offload_param, Megatron "
        "--remote-device cpu), fetched to the device layer by layer",
        to=(
            DeepSpeed("zero_optimization.offload_param", rule="device cpu"),
            Megatron("--remote-device", "cpu when true"),
        ),
    )
    prefetch_bucket_size: int | None = field(
        None,
        "stage 3 only: elements of weights fetched ahead of use (stage3_prefetch_bucket_size); "
        "null leaves DeepSpeed's default (5e7)",
        "elements",
        gt=0,
        to=(DeepSpeed("zero_optimization.stage3_prefetch_bucket_size", stages=(3,)),),
    )
    param_persistence_threshold: int | None = field(
        None,
        "stage 3 only: weights smaller than this stay whole on every rank "
        "(stage3_param_persistence_threshold); null leaves DeepSpeed's default (1e5)",
        "elements",
        ge=0,
        to=(DeepSpeed("zero_optimization.stage3_param_persistence_threshold", stages=(3,)),),
    )
    max_live_parameters: int | None = field(
        None,
        "stage 3 only: gathered weights resident at once before they are released "
        "(stage3_max_live_parameters); null leaves DeepSpeed's default (1e9)",
        "elements",
        gt=0,
        to=(DeepSpeed("zero_optimization.stage3_max_live_parameters", stages=(3,)),),
    )
    max_reuse_distance: int | None = field(
        None,
        "stage 3 only: a weight used again within this many elements is kept gathered "
        "(stage3_max_reuse_distance); null leaves DeepSpeed's default (1e9)",
        "elements",
        ge=0,
        to=(DeepSpeed("zero_optimization.stage3_max_reuse_distance", stages=(3,)),),
    )
    hpz_partition_size: int | None = field(
        None,
        "stage 3 only, ZeRO++ hpZ: a secondary copy of the weights partitioned over this many ranks (the "
        "ranks of a node), so that the backward pass gathers them within the node "
        "(zero_hpz_partition_size); must divide the ranks of a node; null leaves DeepSpeed's 1 (off)",
        "ranks",
        ge=1,
        to=(DeepSpeed("zero_optimization.zero_hpz_partition_size", stages=(3,)),),
    )
    quantized_weights: bool | None = field(
        None,
        "stage 3 only, ZeRO++ qwZ: weights all-gathered as int8 blocks (zero_quantized_weights); needs "
        "DeepSpeed's CUDA quantizer op (refused on CPU); null leaves DeepSpeed's false",
        to=(DeepSpeed("zero_optimization.zero_quantized_weights", stages=(3,)),),
    )
    quantized_gradients: bool | None = field(
        None,
        "stage 3 only, ZeRO++ qgZ: gradients reduce-scattered as int4 across nodes, in full precision "
        "within one (zero_quantized_gradients); acts only across nodes (refused on one node, where it "
        "would silently train plain ZeRO-3) and needs DeepSpeed's CUDA quantizer op (refused on CPU); "
        "null leaves DeepSpeed's false",
        to=(DeepSpeed("zero_optimization.zero_quantized_gradients", stages=(3,)),),
    )
    mics_shard_size: int | None = field(
        None,
        "stage 3 only, MiCS: model states sharded over groups of this many ranks and replicated across "
        "the groups (mics_shard_size); dividing the data-parallel ranks (1: every rank holds all the model "
        "states, all-reduced across the replicas as plain data parallelism does); the engine's model "
        "is built under DeepSpeed's MiCS_Init (launch workarounds, docs/zeropp.md); null leaves DeepSpeed's "
        "-1 (off)",
        "ranks",
        ge=1,
        to=(DeepSpeed("zero_optimization.mics_shard_size", stages=(3,)),),
    )
    mics_hierarchical_params_gather: bool | None = field(
        None,
        "stage 3 only, MiCS: gather the weights within a node first, then across nodes "
        "(mics_hierarchical_params_gather); for a shard spanning nodes (DeepSpeed asserts it does); null "
        "leaves DeepSpeed's false",
        to=(DeepSpeed("zero_optimization.mics_hierarchical_params_gather", stages=(3,)),),
    )


class ActivationCheckpointingSection(Section):
    """Activation checkpointing (recomputation): keep fewer activations in the forward pass and
    recompute them in the backward pass, trading compute for memory (configs/activation_checkpointing/)."""

    granularity: Literal["none", "full", "selective"] = field(
        "none",
        "none: keep every activation; full: recompute whole transformer layers (Megatron "
        "--recompute-granularity full); selective: recompute only the attention core, the cheap part "
        "with the large seq x seq activations (--recompute-granularity selective)",
        to=(
            Megatron("--recompute-granularity", "megatron implementation"),
            Megatron("--checkpoint-activations", "deepspeed implementation"),
        ),
    )
    method: Literal["uniform", "block"] | None = field(
        None,
        "full only. uniform: checkpoint the input of every chunk of num_layers layers; block: "
        "recompute only the first num_layers layers of each pipeline stage (--recompute-method); "
        "null means uniform",
        to=(Megatron("--recompute-method", "full"),),
    )
    num_layers: int | None = field(
        None,
        "full only: layers per checkpointed chunk (uniform) or layers recomputed per pipeline stage "
        "(block) (--recompute-num-layers; --checkpoint-num-layers with the deepspeed implementation); "
        "null means 1",
        "layers",
        gt=0,
        to=(
            Megatron("--recompute-num-layers", "megatron"),
            Megatron("--checkpoint-num-layers", "deepspeed"),
        ),
    )
    implementation: Literal["megatron", "deepspeed"] = field(
        "megatron",
        "full, uniform only: megatron recomputes with Megatron's own checkpointing; deepspeed with "
        "DeepSpeed's (--checkpoint-activations --deepspeed-activation-checkpointing and the ds_config "
        "activation_checkpointing block), which adds the three options below",
        to=(
            Megatron("--deepspeed-activation-checkpointing", "deepspeed"),
            DeepSpeed("activation_checkpointing", rule="deepspeed"),
        ),
    )
    partition_activations: bool = field(
        False,
        "deepspeed implementation: split each checkpoint across the tensor-parallel ranks "
        "(--partition-activations)",
        to=(
            Megatron("--partition-activations", "deepspeed"),
            DeepSpeed("activation_checkpointing.partition_activations", rule="deepspeed"),
        ),
    )
    contiguous_memory: bool = field(
        False,
        "deepspeed implementation, with partition_activations: keep the checkpoints in one "
        "preallocated buffer (--contigious-checkpointing)",
        to=(
            Megatron("--contigious-checkpointing", "deepspeed"),
            DeepSpeed("activation_checkpointing.contiguous_memory_optimization", rule="deepspeed"),
        ),
    )
    cpu_checkpointing: bool = field(
        False,
        "deepspeed implementation: keep the checkpoints in host memory (--checkpoint-in-cpu)",
        to=(
            Megatron("--checkpoint-in-cpu", "deepspeed"),
            DeepSpeed("activation_checkpointing.cpu_checkpointing", rule="deepspeed"),
        ),
    )


class LoggingSection(Section):
    """Where training metrics go besides train.log: TensorBoard and Weights & Biases, written by
    the engine itself into the run directory."""

    tensorboard: bool = field(
        False,
        "write TensorBoard events to RUN_DIR/tensorboard (Megatron --tensorboard-dir, with timers and "
        "validation perplexity), every train.log_interval iterations",
        to=(Megatron("--tensorboard-dir", "RUN_DIR/tensorboard when true"),),
        names_run=False,
    )
    wandb_project: str | None = field(
        None,
        "log to this Weights & Biases project (Megatron --wandb-project); null: no W&B",
        to=(Megatron("--wandb-project", "with --wandb-save-dir RUN_DIR/wandb"),),
        names_run=False,
    )
    wandb_name: str | None = field(
        None,
        "the W&B run name (--wandb-exp-name); null: the run's name",
        to=(Megatron("--wandb-exp-name", "the run's name when null"),),
        names_run=False,
    )
    tensorboard_queue_size: int | None = field(
        None,
        "with tensorboard: events the writer queues before it flushes them (--tensorboard-queue-size); "
        "null: Megatron's 1000",
        "events",
        gt=0,
        to=(Megatron("--tensorboard-queue-size"),),
        names_run=False,
    )
    log_batch_size: bool = field(
        False,
        "with tensorboard: log the global batch size too (--log-batch-size-to-tensorboard)",
        to=(Megatron("--log-batch-size-to-tensorboard"),),
        names_run=False,
    )
    log_optimizer_states: bool = field(
        False,
        "with tensorboard: log the norms of Adam's moments too (--log-optimizer-states-to-tensorboard)",
        to=(Megatron("--log-optimizer-states-to-tensorboard"),),
        names_run=False,
    )
    timing_log_level: int | None = field(
        None,
        "Megatron's timers (--timing-log-level): 0 the iteration time only, 1 also forward-backward and "
        "the optimizer step, 2 every timer, down to each micro batch's forward and backward; printed "
        "every train.log_interval iterations; null: Megatron's 0",
        ge=0,
        le=2,
        to=(Megatron("--timing-log-level"),),
        names_run=False,
    )
    flops_profiler_step: int | None = field(
        None,
        "profile one training step with DeepSpeed's flops profiler (ds_config flops_profiler, enabled): "
        "each module's parameters, FLOPs, latency and achieved FLOPS, printed into train.log once. "
        "DeepSpeed counts its steps from 0: 1 profiles the second iteration (a first one warms up); "
        "null: no profile",
        "iterations",
        gt=0,
        to=(DeepSpeed("flops_profiler.profile_step", rule="with enabled true"),),
        names_run=False,
    )
    flops_profiler_top_modules: int | None = field(
        None,
        "with flops_profiler_step: the modules named at each depth of the profile's aggregated view "
        "(flops_profiler.top_modules); null: DeepSpeed's 1",
        "modules",
        gt=0,
        to=(DeepSpeed("flops_profiler.top_modules"),),
        names_run=False,
    )
    wall_clock_breakdown: bool = field(
        False,
        "DeepSpeed's per-step timing of forward, backward and step (ds_config wall_clock_breakdown), printed "
        "every train.log_interval steps; it synchronizes the device at each timer",
        to=(DeepSpeed("wall_clock_breakdown", rule="as given"),),
    )
    wandb_mode: Literal["online", "offline"] = field(
        "online",
        "W&B's WANDB_MODE: offline keeps the run in RUN_DIR/wandb, to `wandb sync` later",
        to=(Env("WANDB_MODE", "with a W&B project"),),
        names_run=False,
    )


class ExtraSection(Section):
    """The escape hatch: engine settings the schema does not know, passed through unchanged.
    zerolab refuses what it renders itself (set those keys instead) and, where the engine is set
    up, has Megatron's parser and DeepSpeed's config classes check the result before launch."""

    megatron_args: list[str] = field(
        list,
        "extra pretrain_gpt.py arguments, appended as given, e.g. [--use-rotary-position-embeddings]",
        to=(Megatron("...", "appended as given"),),
    )
    ds_config: dict[str, Any] = field(
        dict,
        "extra DeepSpeed config keys, merged into the rendered ds_config (new keys only)",
        to=(DeepSpeed("...", rule="merged, new keys only"),),
    )


SpeedSection: type[Section] = create_model(  # type: ignore[call-overload]
    "SpeedSection",
    __base__=Section,
    __doc__="zerolab's speed switches: changes of the engine's host-side work, each measured on a GPU "
    "by the speed ladder (`zerolab ladder`, docs/speed.md). A switch proven on CPU to train to the "
    "engine's own losses is on by default; one that changes the arithmetic is off by default and says so.",
    **{
        switch.name: (
            bool,
            field(
                switch.default,
                switch.doc,
                to=(Env(SPEED_ENV, "named when true; pretraining only"),),
            ),
        )
        for switch in SWITCHES
    },
)


class PrecisionSection(Section):
    """Training number format (configs/precision/); both false is fp32."""

    bf16: bool = field(
        False,
        "train in bfloat16 (Megatron --bf16, ds_config bf16.enabled)",
        to=(
            Megatron("--bf16"),
            DeepSpeed("bf16.enabled", rule="when true"),
        ),
    )
    fp16: bool = field(
        False,
        "train in float16 with dynamic loss scaling (GPU only)",
        to=(
            Megatron("--fp16"),
            DeepSpeed("fp16.enabled", rule="when true, with loss_scale 0: dynamic"),
        ),
    )
    initial_scale_power: int = field(
        16,
        "fp16 only: the first loss scale is 2**this",
        "log2",
        ge=0,
        to=(DeepSpeed("fp16.initial_scale_power", rule="with fp16"),),
    )
    loss_scale_window: int = field(
        1000,
        "fp16 only: steps without overflow before raising the scale",
        "steps",
        gt=0,
        to=(DeepSpeed("fp16.loss_scale_window", rule="with fp16"),),
    )
    hysteresis: int = field(
        2,
        "fp16 only: overflows tolerated before lowering the scale",
        "steps",
        gt=0,
        to=(DeepSpeed("fp16.hysteresis", rule="with fp16"),),
    )
    min_loss_scale: float = field(
        1.0,
        "fp16 only: the loss scale never drops below this",
        gt=0,
        to=(DeepSpeed("fp16.min_loss_scale", rule="with fp16"),),
    )
    grad_accum_dtype: Literal["fp32", "bf16", "fp16"] | None = field(
        None,
        "the number format DeepSpeed accumulates gradients in (ds_config data_types.grad_accum_dtype). "
        "With bf16 at ZeRO stage 1 and no offload, fp32 steps through DeepSpeed's BF16_Optimizer, which "
        "accumulates and reduces the gradients in fp32 (upstream's bf16 scripts ask for it); without "
        "ZeRO it must be the training format (the engine refuses another); null: the training format",
        to=(DeepSpeed("data_types.grad_accum_dtype"),),
    )


BLEND_RULE = "one argument a prefix; a blend's weights and prefixes, one argument each"
"""How a dataset key reaches Megatron, whose data-path flags take a list of words."""


class DataSection(Section):
    """The prepared dataset and tokenizer (configs/data/); relative paths are relative to the current
    directory."""

    name: str = field("dolly", "name of the dataset, as reported in summaries", to=(Zerolab("summaries"),))
    path: str | None = field(
        "data/dolly_text_document",
        "Megatron data prefix: PREFIX.bin and PREFIX.idx, dealt into splits by data.split; or a "
        "weighted blend of prefixes, `W1 PREFIX1 W2 PREFIX2 ...` (Megatron draws each sample from a "
        "prefix by its weight; each weight a number above 0, each prefix prepared); null: the split "
        "datasets of data.train_path, valid_path and test_path",
        "path prefix",
        to=(Megatron("--data-path", BLEND_RULE),),
        names_run=False,
    )
    train_path: str | None = field(
        None,
        "the training split written by `zerolab prep ... --split` (OUT_train_text_document), with "
        "data.path null; data.split then does not apply",
        "path prefix",
        to=(Megatron("--train-data-path", BLEND_RULE),),
        names_run=False,
    )
    valid_path: str | None = field(
        None,
        "the validation split (OUT_valid_text_document), with data.train_path; null: no evaluation data",
        "path prefix",
        to=(Megatron("--valid-data-path", BLEND_RULE),),
        names_run=False,
    )
    test_path: str | None = field(
        None,
        "the test split (OUT_test_text_document), with data.train_path",
        "path prefix",
        to=(Megatron("--test-data-path", BLEND_RULE),),
        names_run=False,
    )
    prepare_command: str = field(
        "zerolab prep dolly --out data/dolly",
        "the command that writes the dataset, shown when it is missing",
        to=(Zerolab("the hint when the data is missing"),),
        names_run=False,
    )
    min_documents: int | None = field(
        None,
        "the fewest documents the dataset must hold (counted in its .idx files; with data.train_path, "
        "all splits together): a smaller one, such as the CPU demo's 151-record sample prepared where a "
        "full corpus belongs, is refused before launch (render warns), naming data.prepare_command; "
        "null: any size",
        "documents",
        ge=1,
        to=(Zerolab("the launch check"),),
        names_run=False,
    )
    split: str = field(
        "98,2,0",
        "train,validation,test weights over the documents of data.path (Megatron --split), in any form "
        "the engine reads: separated by commas (spaces allowed: `969, 30, 1`) or slashes (`90/10`), whole "
        "or decimal numbers, the missing ones 0 (Megatron reads the first three)",
        to=(Megatron("--split", "with data.path"),),
    )
    tokenizer_type: Literal[
        "GPT2BPETokenizer", "GPTSentencePieceTokenizer", "SentencePieceTokenizer", "HFTokenizer"
    ] = field(
        "GPT2BPETokenizer",
        "Megatron tokenizer class: GPT2BPETokenizer (GPT-2's BPE: data.vocab_file and data.merge_file), "
        "GPTSentencePieceTokenizer (a SentencePiece model such as Llama's tokenizer.model: "
        "data.tokenizer_model), SentencePieceTokenizer (the same model with Megatron's special tokens "
        "<CLS> <SEP> <EOD> <MASK> added, documents ended by <EOD>) or HFTokenizer (a Hugging Face "
        "tokenizer folder: data.tokenizer_model); "
        "the dataset prepared with the same, `zerolab prep ... --tokenizer-model FILE_OR_FOLDER`, and "
        "model.vocab_size its vocabulary. The dataset's manifest must name the same tokenizer",
        to=(Megatron("--tokenizer-type"),),
    )
    tokenizer_model: str | None = field(
        None,
        "the SentencePiece model of GPTSentencePieceTokenizer and SentencePieceTokenizer (tokenizer.model), "
        "or the Hugging Face "
        "tokenizer folder of HFTokenizer (tokenizer.json, tokenizer_config.json naming its eos token, and "
        "the files AutoTokenizer reads); null with GPT2BPETokenizer",
        "path",
        to=(Megatron("--tokenizer-model"),),
        names_run=False,
    )
    vocab_file: str | None = field(
        None,
        "GPT-2 BPE vocabulary (vocab.json); null: the one bundled with zerolab (zerolab/assets/gpt2)",
        "path",
        to=(Megatron("--vocab-file", "with GPT2BPETokenizer; null: the bundled file"),),
        names_run=False,
    )
    merge_file: str | None = field(
        None,
        "GPT-2 BPE merges (merges.txt); null: the one bundled with zerolab (zerolab/assets/gpt2)",
        "path",
        to=(Megatron("--merge-file", "with GPT2BPETokenizer; null: the bundled file"),),
        names_run=False,
    )
    impl: Literal["mmap", "infer", "lazy", "cached"] | None = field(
        None,
        "how Megatron reads the prepared dataset (--data-impl): mmap, as zerolab prep writes it; null: "
        "Megatron's infer, which finds mmap from the index file",
        to=(Megatron("--data-impl"),),
        names_run=False,
    )
    num_workers: int = field(
        2, "data-loader worker processes per rank", "processes", ge=0, to=(Megatron("--num-workers"),)
    )

    @field_validator("split", mode="before")
    @classmethod
    def _one_weight(cls, value: Any) -> Any:
        """A single weight (`data.split=100`, read by YAML as a number) is the split of that text."""
        return str(value) if isinstance(value, int | float) and not isinstance(value, bool) else value

    @field_validator("split")
    @classmethod
    def _megatron_split(cls, value: str) -> str:
        """A form of --split the engine reads (zerolab.recipe.megatron_split)."""
        if re.fullmatch(SPLIT_PATTERN, value) is None:
            raise ValueError(
                "give the train,validation,test weights as Megatron's --split reads them: numbers separated "
                "by commas or by slashes, e.g. 98,2,0 or 969, 30, 1 or 90/10"
            )
        return value


class TrainSection(Section):
    """Batch, length, optimizer and logging. Give exactly one of iters, tokens, epochs and samples."""

    micro_batch_size: int = field(
        4,
        "sequences per rank per forward pass",
        "sequences",
        gt=0,
        le=MAX_BATCH,
        to=(
            Megatron("--micro-batch-size"),
            DeepSpeed("train_micro_batch_size_per_gpu"),
        ),
    )
    global_batch_size: int = field(
        32,
        "sequences per optimizer step = micro x grad-accum x data parallel",
        "sequences",
        gt=0,
        le=MAX_BATCH,
        to=(
            Megatron("--global-batch-size"),
            DeepSpeed("train_batch_size"),
        ),
    )
    gradient_accumulation_steps: int | None = field(
        None,
        "micro batches per step per rank; null derives it from the two batch sizes",
        "micro batches",
        gt=0,
        le=MAX_BATCH,
        to=(DeepSpeed("gradient_accumulation_steps", rule="derived from the batch sizes when null"),),
    )
    iters: int | None = field(
        None,
        "training length as optimizer steps",
        "iterations",
        gt=0,
        to=(Megatron("--train-iters", "iters, tokens or epochs, in iterations"),),
    )
    tokens: int | None = field(
        None,
        "training length as tokens; rounded up to whole iterations of global x seq tokens",
        "tokens",
        gt=0,
        to=(Megatron("--train-iters", "in iterations"),),
    )
    epochs: float | None = field(
        None,
        "training length as passes over the training split of the prepared dataset (needs the data)",
        "epochs",
        gt=0,
        to=(Megatron("--train-iters", "in iterations"),),
    )
    samples: int | None = field(
        None,
        "training length as samples (sequences), Megatron's sample-based training: the engine trains "
        "samples // global batch iterations (with rampup_batch_size, the ramp's iterations first, as "
        "Megatron counts them); the warm-up is then given in tokens (lr_warmup_tokens), Megatron "
        "refusing lr_warmup_iters",
        "samples",
        gt=0,
        to=(Megatron("--train-samples"),),
    )
    rampup_batch_size: tuple[int, int, int] | None = field(
        None,
        "batch-size ramp-up over a sample-based length (train.samples): [start, increment, samples]: "
        "the global batch starts at `start` sequences and grows by `increment` at even steps over the "
        "first `samples` samples, up to global_batch_size (Megatron --rampup-batch-size); each batch "
        "of the ramp a multiple of micro batch x data parallel",
        "sequences, sequences, samples",
        to=(Megatron("--rampup-batch-size"),),
    )
    max_tokens: int | None = field(
        None,
        "stop once this many tokens have been trained, whatever the length says (Megatron-DeepSpeed "
        "--train-tokens, the upstream scripts' token budget); null: the length alone",
        "tokens",
        gt=0,
        to=(Megatron("--train-tokens"),),
    )
    exit_duration_mins: int | None = field(
        None,
        "stop (saving a checkpoint where train.save_interval is set) once training has run this long "
        "(--exit-duration-in-mins); null: no time limit",
        "minutes",
        gt=0,
        to=(Megatron("--exit-duration-in-mins"),),
        names_run=False,
    )
    exit_interval: int | None = field(
        None,
        "stop after the first iteration that is a multiple of this (Megatron --exit-interval), saving a "
        "checkpoint there where train.save_interval is set, though the length and the schedule say more; "
        "null: train the whole length",
        "iterations",
        gt=0,
        to=(Megatron("--exit-interval"),),
    )
    lr: float = field(1.5e-4, "peak learning rate", "1/step", gt=0, to=(Megatron("--lr"),))
    min_lr: float = field(
        1.0e-5, "learning rate at the end of the decay", "1/step", ge=0, to=(Megatron("--min-lr"),)
    )
    lr_decay_style: Literal["cosine", "linear", "constant"] = field(
        "cosine", "learning-rate decay after warm-up", to=(Megatron("--lr-decay-style"),)
    )
    lr_warmup_iters: int = field(
        0, "linear learning-rate warm-up", "iterations", ge=0, to=(Megatron("--lr-warmup-iters"),)
    )
    lr_warmup_tokens: int | None = field(
        None,
        "linear learning-rate warm-up over this many tokens (Megatron-DeepSpeed's token-based "
        "schedule, --lr-warmup-tokens), in place of lr_warmup_iters; null: warm-up in iterations",
        "tokens",
        ge=0,
        to=(Megatron("--lr-warmup-tokens"),),
    )
    lr_decay_tokens: int | None = field(
        None,
        "decay the learning rate over this many tokens (--lr-decay-tokens), warm-up included, then "
        "keep min_lr; null: decay over the whole length in iterations",
        "tokens",
        gt=0,
        to=(Megatron("--lr-decay-tokens"),),
    )
    weight_decay: float = field(
        0.1,
        "AdamW weight decay. Upstream: under ZeRO-3 the pinned engine picks its no-decay groups from "
        "already-partitioned shapes and trains with no weight decay at all; zerolab's launch workaround "
        "zero3_weight_decay_groups gives it the decay asked for (docs/findings/zero3-loss.md), so a ZeRO-3 "
        "run differs from upstream's, as its train.log says",
        ge=0,
        to=(Megatron("--weight-decay"),),
    )
    adam_beta1: float = field(0.9, "Adam beta1", gt=0, lt=1, to=(Megatron("--adam-beta1"),))
    adam_beta2: float = field(
        0.95,
        "Adam beta2. Upstream default: Megatron's is 0.999; zerolab's 0.95 is GPT-3's and upstream's "
        "scripts' own (--adam-beta2 0.95), steadier at large batches; a ported launch that left it to "
        "Megatron keeps 0.999 (`zerolab from-command` names it)",
        gt=0,
        lt=1,
        to=(Megatron("--adam-beta2"),),
    )
    clip_grad: float = field(
        1.0,
        "gradient-norm clipping (Megatron --clip-grad, ds_config gradient_clipping). Upstream: under "
        "DeepSpeed only gradient_clipping clips (its engine steps the optimizer; Megatron's --clip-grad is "
        "not read), so nine upstream scripts pass --clip-grad 1.0 and clip nothing; zerolab sets both from "
        "this one key, so the value given is the one trained with; a ported launch gets DeepSpeed's value",
        ge=0,
        to=(
            Megatron("--clip-grad"),
            DeepSpeed("gradient_clipping"),
        ),
    )
    prescale_gradients: bool = field(
        False,
        "divide gradients by the data-parallel size before their all-reduce rather than after "
        "(ds_config prescale_gradients; upstream's scripts turn it on without ZeRO): the same "
        "average, less overflow risk in fp16",
        to=(DeepSpeed("prescale_gradients", rule="when true"),),
    )
    seed: int = field(1234, "random seed", ge=0, to=(Megatron("--seed"),))
    log_interval: int = field(
        10,
        "iterations between log lines (also the ds_config steps_per_print)",
        "iterations",
        gt=0,
        to=(
            Megatron("--log-interval"),
            DeepSpeed("steps_per_print"),
        ),
    )
    eval_interval: int = field(
        1000, "iterations between validation runs", "iterations", gt=0, to=(Megatron("--eval-interval"),)
    )
    eval_iters: int = field(
        10, "validation iterations per validation run", "iterations", ge=0, to=(Megatron("--eval-iters"),)
    )
    save_interval: int | None = field(
        None,
        "iterations between checkpoints, saved in the run directory's checkpoints/ (and at the end); "
        "null saves none. `zerolab launch --resume RUN_DIR` continues from the last one",
        "iterations",
        gt=0,
        to=(Megatron("--save-interval", "with --save RUN_DIR/checkpoints"),),
    )
    save_interval_epochs: float | None = field(
        None,
        "the checkpoint interval in passes over the training split of the prepared dataset (needs the "
        "data), as model zoos save one per epoch: 1 saves every epoch, 0.5 twice an epoch; rendered "
        "in iterations, ceil(epochs x samples per epoch / global batch), at least 1. Give this or "
        "save_interval, not both",
        "epochs",
        gt=0,
        to=(Megatron("--save-interval", "in iterations, with --save RUN_DIR/checkpoints"),),
    )


DEFAULT_MASTER_PORT = 29500
"""The rendezvous port where hardware.master_port is null and neither the launch nor the scheduler
chooses one: several nodes need one port agreed beforehand (torchrun's and DeepSpeed's default)."""


NODE_PLACING_BACKENDS = ("slurm",)
"""The backends whose scheduler places the nodes: node_rank, master_addr and hostfile are its own."""


class HardwareSection(Section):
    """Where it runs and how it is launched (configs/hardware/)."""

    device: Literal["cpu", "cuda"] = field(
        "cuda",
        "cuda (NCCL) or cpu (DS_ACCELERATOR=cpu, gloo)",
        to=(
            Env("DS_ACCELERATOR", "cpu"),
            Megatron("--distributed-backend", "gloo on cpu, nccl on cuda"),
        ),
    )
    launcher: Literal["torchrun", "deepspeed"] = field(
        "torchrun", "the program that starts the ranks", to=(Launcher("torchrun or deepspeed"),)
    )
    backend: Literal["local", "hostfile", "slurm"] = field(
        "local",
        "who starts the launch (zerolab.backends, docs/backends.md): local runs the launcher on this "
        "machine (each node's own command with node_rank), hostfile the deepspeed launcher here starting "
        "every node of hardware.hostfile over pdsh/ssh, slurm a SLURM job placing the nodes itself "
        "(`--slurm` sets it)",
        to=(Zerolab("the launch backend: placement, the job written, submitted and followed"),),
        names_run=False,
    )
    nodes: int = field(1, "machines", "nodes", gt=0, to=(Launcher("--nnodes / --num_nodes"),))
    procs_per_node: int = field(
        2,
        "ranks per machine (one per GPU on cuda)",
        "processes",
        gt=0,
        to=(
            Launcher("--nproc-per-node / --num_gpus"),
            Env("LOCAL_SIZE", "cpu, torchrun"),
        ),
    )
    world_size: int | None = field(
        None,
        "total ranks; when given it must equal nodes x procs_per_node",
        "processes",
        gt=0,
        to=(Zerolab("checked against nodes x procs_per_node"),),
    )
    node_rank: int = field(
        0,
        "this machine's rank (torchrun, multi-node)",
        ge=0,
        to=(Launcher("--node-rank (torchrun, several nodes)"),),
        names_run=False,
    )
    master_addr: str = field(
        "127.0.0.1",
        "address of node 0 (multi-node)",
        "host",
        to=(Launcher("--master-addr / --master_addr (several nodes)"),),
        names_run=False,
    )
    master_port: int | None = field(
        None,
        "rendezvous port on node 0; null: a one-node `zerolab launch` takes a free port (as torchrun "
        "--standalone does, but from 10000-19999, where no outgoing connection is given one) and records "
        "it in command.sh and run.json, a SLURM job takes one from its job "
        f"id (20000-31999: two jobs on one node do not share it), and several nodes (and a render) use "
        f"{DEFAULT_MASTER_PORT}. A port given is kept, and a one-node launch refused when it is in use",
        "port",
        gt=0,
        lt=65536,
        to=(Launcher("--master-port / --master_port"),),
        names_run=False,
    )
    hostfile: str | None = field(
        None,
        "DeepSpeed hostfile listing the nodes (deepspeed launcher, multi-node)",
        "path",
        to=(Launcher("--hostfile (deepspeed)"),),
        names_run=False,
    )
    omp_num_threads: int | None = field(
        None,
        "OMP_NUM_THREADS for every rank; null leaves the launcher's default",
        "threads",
        gt=0,
        to=(Env("OMP_NUM_THREADS"),),
    )
    host_huge_pages: bool = field(
        False,
        "torch's host tensors of 2 MiB and more on transparent huge pages (THP_MEM_ALLOC_ENABLE=1, "
        "PyTorch's own switch; it works where the kernel's THP mode is madvise or always): one page "
        "fault per 2 MiB instead of 512 when a tensor is made. The CPU configs turn it on: each CPU "
        "micro batch's LM head makes and frees its fp32 logits (51 MB for the tiny demo) several times, "
        "faulted in afresh each time; the demo's five setups trained in 200-206 s against 224 s, peak "
        "host memory unchanged (docs/launching.md)",
        to=(Env(HOST_HUGE_PAGES_ENV, "1 when true"),),
    )


GlueTaskName = Literal[tuple(GLUE_TASKS)]  # type: ignore[valid-type]
"""The nine GLUE tasks' names, as zerolab.contracts.GLUE_TASKS lists them."""


class FinetuneSection(Section):
    """Fine-tuning instead of pretraining (configs/finetune/): a Hugging Face GPT-2 given a
    classification head and trained on a GLUE task by zerolab's loop on DeepSpeed's engine
    (zerolab.rank.finetune_loop), with the recipe's zero, precision, hardware and logging sections and
    train's batch sizes, epochs, rate and optimizer. The model's shape is read from its config.json;
    model.seq_length is run_glue.py's max_seq_length. docs/fine-tuning.md."""

    model: str = field(
        "gpt2",
        "the model to fine-tune: a Hugging Face GPT-2 folder (config.json, weights and tokenizer), a "
        "hub name (downloaded by transformers on first use), or a run directory of `zerolab launch` "
        "(exported to RUN_DIR/model by `zerolab export` when the launch starts); relative to the "
        "current directory",
        "path or hub name",
        to=(Zerolab("request.json's model; run.json's model"),),
    )
    model_command: str | None = field(
        None,
        "the command that makes the folder of finetune.model (its `--out`), shown when it is missing",
        to=(Zerolab("the hint when the model is missing"),),
        names_run=False,
    )
    task: GlueTaskName = field(
        "mrpc",
        "the GLUE task (zerolab.contracts.GLUE_TASKS: run_glue.py's columns, labels and metrics for each)",
        to=(Zerolab("request.json's task; the head's label count and the metrics"),),
    )
    data: str = field(
        "data/glue",
        "the folder of the task's split files, TASK_train.jsonl and TASK_validation.jsonl (MNLI: "
        "validation_matched and validation_mismatched), as `zerolab prep glue TASK` writes them",
        "path",
        to=(Zerolab("request.json's train_file and eval_files"),),
        names_run=False,
    )
    prepare_command: str | None = field(
        None,
        "the command that writes finetune.data (its `--out`), shown when a split file is missing; "
        "null, or a command writing another folder: `zerolab prep glue TASK --out DATA`",
        to=(Zerolab("the hint when the data is missing"),),
        names_run=False,
    )
    shuffle: bool = field(
        True,
        "deal the training examples in a new order each epoch (seeded by train.seed), as Hugging "
        "Face's Trainer does; false: in file order",
        to=(Zerolab("request.json's shuffle"),),
    )

    @field_validator("model", "data")
    @classmethod
    def _home_folder(cls, value: str) -> str:
        """A path starting with `~` (or `~user`) starts in a home folder, as in a shell."""
        return os.path.expanduser(value) if value.startswith("~") else value


MEGATRON_EXPERT_INTERVAL = 2
"""Megatron-DeepSpeed's --expert-interval default: every second layer is an MoE layer."""


class MoeSection(Section):
    """Mixture of experts: DeepSpeed's MoE layers in place of the MLP of every
    moe.expert_interval-th transformer layer (Megatron-DeepSpeed's --num-experts and its options, as
    upstream's examples_deepspeed/MoE scripts pass them). Each key's null is Megatron's default,
    and renders nothing. Pretraining only; the estimate does not model experts (it says so)."""

    num_experts: list[int] | None = field(
        None,
        "experts of each MoE layer (--num-experts): one number for every MoE layer, or one per MoE "
        "layer (num_layers / expert_interval of them; PR-MoE's pyramid, e.g. [64, 64, 128]); null or "
        "[1]: dense, no MoE",
        "experts",
        to=(Megatron("--num-experts"),),
    )
    expert_parallel: int | None = field(
        None,
        "ranks each MoE layer's experts are spread over (--moe-expert-parallel-size), drawn from the "
        "data-parallel ranks: it must divide the data-parallel size and each layer's experts; tokens "
        "travel to their experts all-to-all. null: 1, every rank holds every expert",
        "ranks",
        gt=0,
        to=(Megatron("--moe-expert-parallel-size"),),
    )
    expert_interval: int | None = field(
        None,
        "every this-many-th layer is an MoE layer (--expert-interval); null: Megatron's 2",
        "layers",
        gt=0,
        to=(Megatron("--expert-interval"),),
    )
    topk: int | None = field(
        None,
        "experts each token is routed to (--topk, the gate's top-k); null: 1",
        "experts",
        gt=0,
        to=(Megatron("--topk"),),
    )
    mlp_type: Literal["standard", "residual"] | None = field(
        None,
        "residual: PR-MoE's Residual-MoE, a dense MLP beside the experts in each MoE layer, their outputs "
        "mixed by a learned coefficient (--mlp-type residual); null or standard: experts only",
        to=(Megatron("--mlp-type"),),
    )
    train_capacity_factor: float | None = field(
        None,
        "training: an expert takes at most this x its even share of a batch's tokens "
        "(--moe-train-capacity-factor), the rest dropped (moe.token_dropping); null: 1.0",
        gt=0,
        to=(Megatron("--moe-train-capacity-factor"),),
    )
    eval_capacity_factor: float | None = field(
        None,
        "the capacity factor at evaluation (--moe-eval-capacity-factor); null: 1.0",
        gt=0,
        to=(Megatron("--moe-eval-capacity-factor"),),
    )
    min_capacity: int | None = field(
        None,
        "an expert's capacity is at least this, whatever the factor (--moe-min-capacity); null: 4",
        "tokens",
        ge=0,
        to=(Megatron("--moe-min-capacity"),),
    )
    token_dropping: bool = field(
        True,
        "drop the tokens beyond an expert's capacity (false: --disable-moe-token-dropping, no capacity "
        "limit: slower, sometimes better converged)",
        to=(Megatron("--disable-moe-token-dropping", "when false"),),
    )
    loss_coeff: float | None = field(
        None,
        "weight of the gates' load-balancing loss added to the language-model loss (--moe-loss-coeff); "
        "null: Megatron's 0.1. Read only with experts; upstream's dense scripts pass it too, and a "
        "dense recipe may keep it (it changes nothing there)",
        ge=0,
        to=(Megatron("--moe-loss-coeff"),),
    )
    param_group: bool = field(
        False,
        "put the experts' weights in optimizer groups of their own (--create-moe-param-group), which "
        "DeepSpeed's ZeRO needs with experts (its optimizer reduces them over the expert-data-parallel "
        "ranks)",
        to=(Megatron("--create-moe-param-group"),),
    )

    @field_validator("num_experts", mode="before")
    @classmethod
    def _one_count(cls, value: Any) -> Any:
        """A single count (`moe.num_experts=4`) is the list of one."""
        return [value] if isinstance(value, int) and not isinstance(value, bool) else value

    @property
    def experts(self) -> list[int]:
        """The experts per MoE layer as given, [1] for a dense model."""
        return self.num_experts or [1]

    @property
    def enabled(self) -> bool:
        """Whether any layer has more than one expert."""
        return max(self.experts) > 1


class CurriculumSection(Section):
    """DeepSpeed's sequence-length curriculum (the ds_config curriculum_learning block, seqlen type,
    as upstream's *_cl and *_slw scripts set it): each iteration trains the first L tokens of every
    sequence, L growing from min_seq_length to max_seq_length over `steps` iterations, a multiple of
    difficulty_step (DeepSpeed's engine hands the model the length at each step; Megatron's training
    loop on the pipeline engine). Pretraining only; the estimate counts the whole model.seq_length, the
    curriculum's longest."""

    enabled: bool = field(
        False,
        "train with the sequence-length curriculum (ds_config curriculum_learning, curriculum_type seqlen)",
        to=(DeepSpeed("curriculum_learning.enabled", rule="when true, with curriculum_type seqlen"),),
    )
    min_seq_length: int | None = field(
        None,
        "the sequence length the curriculum starts from (min_difficulty); needed when enabled",
        "tokens",
        gt=0,
        to=(DeepSpeed("curriculum_learning.min_difficulty", rule="when enabled"),),
    )
    max_seq_length: int | None = field(
        None,
        "the length it grows to (max_difficulty); null: model.seq_length",
        "tokens",
        gt=0,
        to=(
            DeepSpeed("curriculum_learning.max_difficulty", rule="when enabled; model.seq_length when null"),
        ),
    )
    schedule: Literal["fixed_linear", "fixed_root"] = field(
        "fixed_linear",
        "how the length grows (schedule_type): fixed_linear in proportion to the iterations, fixed_root as "
        "their root_degree-th root (fast at first)",
        to=(DeepSpeed("curriculum_learning.schedule_type", rule="when enabled"),),
    )
    steps: int | None = field(
        None,
        "iterations until max_seq_length is reached (schedule_config.total_curriculum_step); needed when "
        "enabled",
        "iterations",
        gt=0,
        to=(DeepSpeed("curriculum_learning.schedule_config.total_curriculum_step", rule="when enabled"),),
    )
    difficulty_step: int = field(
        8,
        "each length is a multiple of this (schedule_config.difficulty_step; 8 keeps Tensor Cores busy)",
        "tokens",
        gt=0,
        to=(DeepSpeed("curriculum_learning.schedule_config.difficulty_step", rule="when enabled"),),
    )
    root_degree: int | None = field(
        None,
        "schedule fixed_root only: the root taken (schedule_config.root_degree)",
        gt=0,
        to=(DeepSpeed("curriculum_learning.schedule_config.root_degree", rule="fixed_root"),),
    )


class DistillationSection(Section):
    """Knowledge distillation from a trained teacher (Megatron-DeepSpeed's --kd, and --mos, its
    mixture-of-students form for experts, as upstream's compression/*_kd and MoE/*_MoS scripts pass
    them): the teacher, a checkpoint of the teacher's shape, runs each batch too, and the student also
    learns its softened outputs (beta_ce x temperature^2 x KL divergence / seq_length, added to the
    loss). The keys' null is Megatron's default. Pretraining only, pipeline parallel 1 (the engine's
    limit) and ZeRO 0-2 (zerolab's workaround distillation_student_wrapped_once makes the engine's
    set-up of the student run under ZeRO 1-2); the estimate does not model the teacher (it says so)."""

    kd: bool = field(False, "distil from the teacher (--kd)", to=(Megatron("--kd"),))
    mos: bool = field(
        False,
        "mixture of students (--mos): the same distillation, as upstream's PR-MoE MoS scripts name it",
        to=(Megatron("--mos"),),
    )
    teacher: str | None = field(
        None,
        "the teacher's checkpoint folder (--load-teacher), e.g. a run directory's checkpoints/ (its "
        "latest_checkpointed_iteration.txt picks the iteration); checked before launch: a folder "
        "without a checkpoint would leave the teacher random",
        "path",
        to=(Megatron("--load-teacher"),),
        names_run=False,
    )
    teacher_num_layers: int | None = field(
        None, "the teacher's layers (--num-layers-teacher)", "layers", gt=0, le=MAX_LAYERS,
        to=(Megatron("--num-layers-teacher"),),
    )  # fmt: skip
    teacher_hidden_size: int | None = field(
        None, "the teacher's hidden size (--hidden-size-teacher)", "elements", gt=0, le=MAX_HIDDEN,
        to=(Megatron("--hidden-size-teacher"),),
    )  # fmt: skip
    teacher_num_attention_heads: int | None = field(
        None, "the teacher's attention heads (--num-attention-heads-teacher)", "heads", gt=0, le=MAX_HEADS,
        to=(Megatron("--num-attention-heads-teacher"),),
    )  # fmt: skip
    teacher_num_experts: list[int] | None = field(
        None,
        "the teacher's experts per MoE layer (--num-experts-teacher), as moe.num_experts; null: dense",
        "experts",
        to=(Megatron("--num-experts-teacher"),),
    )
    alpha_ce: float | None = field(
        None, "--kd-alpha-ce: pretrain_gpt.py reads it and, at the pinned commit, uses it not; null: 1", ge=0,
        to=(Megatron("--kd-alpha-ce"),),
    )  # fmt: skip
    beta_ce: float | None = field(
        None, "weight of the distillation loss (--kd-beta-ce); null: 1", ge=0, to=(Megatron("--kd-beta-ce"),)
    )
    temperature: float | None = field(
        None, "softmax temperature of both models' outputs (--kd-temp); null: 1.0", gt=0,
        to=(Megatron("--kd-temp"),),
    )  # fmt: skip

    @field_validator("teacher_num_experts", mode="before")
    @classmethod
    def _one_count(cls, value: Any) -> Any:
        """A single count is the list of one."""
        return [value] if isinstance(value, int) and not isinstance(value, bool) else value

    @field_validator("teacher")
    @classmethod
    def _home_folder(cls, value: str | None) -> str | None:
        """A path starting with `~` starts in a home folder, as in a shell."""
        return os.path.expanduser(value) if value and value.startswith("~") else value

    @property
    def enabled(self) -> bool:
        """Whether a teacher is distilled from (--kd or --mos)."""
        return self.kd or self.mos


class Recipe(Section):
    """A resolved recipe: building blocks from `base`, then the file's keys, then overrides."""

    base: list[str] = field(
        list,
        "building blocks under configs/, merged in order (e.g. model/gpt2-1.5b)",
        to=(Zerolab("composition"),),
    )
    description: str = field("", "one line on what this recipe is for", to=(Zerolab("render's header"),))
    engine: Literal["megatron-deepspeed", "fsdp2"] = field(
        "megatron-deepspeed",
        "what trains the recipe: Megatron-DeepSpeed's pretrain_gpt.py (ZeRO by DeepSpeed), or zerolab's "
        "FSDP2 loop (PyTorch's fully_shard on the same GPT-2, data, samples and schedule; the zero section "
        "mapped as docs/engines.md tables it: z0 DDP, z1 and z2 weights kept whole between forward and "
        "backward, z3 resharded after forward, offload CPUOffloadPolicy)",
        to=(Zerolab("the job kind: the program every rank runs"),),
    )
    model: ModelSection = field(ModelSection, "model shape")
    parallel: ParallelSection = field(ParallelSection, "tensor and pipeline parallelism")
    zero: ZeroSection = field(ZeroSection, "ZeRO setup")
    activation_checkpointing: ActivationCheckpointingSection = field(
        ActivationCheckpointingSection, "activation checkpointing (recomputation)"
    )
    precision: PrecisionSection = field(PrecisionSection, "number format")
    data: DataSection = field(DataSection, "dataset and tokenizer")
    train: TrainSection = field(TrainSection, "batch, length, optimizer, logging")
    hardware: HardwareSection = field(HardwareSection, "devices, nodes and launcher")
    logging: LoggingSection = field(LoggingSection, "TensorBoard and Weights & Biases")
    extra: ExtraSection = field(ExtraSection, "engine settings the schema does not know")
    speed: SpeedSection = field(SpeedSection, "zerolab's speed switches (host-side work of the engine)")
    moe: MoeSection = field(MoeSection, "mixture of experts (DeepSpeed's MoE layers)")
    curriculum: CurriculumSection = field(CurriculumSection, "sequence-length curriculum (DeepSpeed's)")
    distillation: DistillationSection = field(DistillationSection, "knowledge distillation from a teacher")
    finetune: FinetuneSection | None = field(
        None, "fine-tune a Hugging Face GPT-2 on a GLUE task instead of pretraining; null: pretraining"
    )

    _name: str = PrivateAttr("recipe")
    _path: str | None = PrivateAttr(None)
    _overrides: tuple[str, ...] = PrivateAttr(())

    @property
    def name(self) -> str:
        """The recipe file's stem, e.g. `gpt2_z1`."""
        return self._name

    @property
    def path(self) -> str | None:
        """The recipe file as given, or None for a recipe built in code."""
        return self._path

    @property
    def overrides(self) -> tuple[str, ...]:
        """The command-line overrides applied on top of the file, as given (`model=gpt2-124m`)."""
        return self._overrides

    @property
    def world_size(self) -> int:
        """Total ranks: nodes x processes per node."""
        return self.hardware.nodes * self.hardware.procs_per_node

    @property
    def model_parallel_size(self) -> int:
        """Ranks holding one copy of the model: tensor x pipeline."""
        return self.parallel.tensor * self.parallel.pipeline

    @property
    def data_parallel_size(self) -> int:
        """World size / (tensor x pipeline x sequence), as Megatron and DeepSpeed count it (a
        sequence's ranks train one batch); valid after the checks passed."""
        return self.world_size // (self.model_parallel_size * self.parallel.sequence)

    @property
    def gradient_accumulation_steps(self) -> int:
        """Given, or global batch / (micro batch x data parallel)."""
        if self.train.gradient_accumulation_steps is not None:
            return self.train.gradient_accumulation_steps
        return self.train.global_batch_size // (self.train.micro_batch_size * self.data_parallel_size)

    @property
    def padded_vocab_size(self) -> int:
        """The vocabulary as Megatron pads it (padded_vocab); a fine-tuned model's is its own."""
        if self.finetune is not None:
            return self.model.vocab_size
        return padded_vocab(
            self.model.vocab_size, self.model.make_vocab_size_divisible_by, self.parallel.tensor
        )

    @property
    def precision_name(self) -> str:
        """`fp32`, `bf16` or `fp16`."""
        if self.precision.bf16:
            return "bf16"
        return "fp16" if self.precision.fp16 else "fp32"


SECTIONS: tuple[str, ...] = (
    "model",
    "parallel",
    "zero",
    "activation_checkpointing",
    "precision",
    "data",
    "train",
    "hardware",
    "logging",
    "extra",
    "speed",
    "moe",
    "curriculum",
    "distillation",
    "finetune",
)


def section_class(annotation: Any) -> type[BaseModel] | None:
    """The section model a field's annotation holds (`FinetuneSection | None`: FinetuneSection), or
    None for a plain value."""
    for candidate in (annotation, *typing.get_args(annotation)):
        if isinstance(candidate, type) and issubclass(candidate, BaseModel):
            return candidate
    return None


def section_at(path: tuple[str, ...]) -> type[BaseModel] | None:
    """The section model at a key path (`()`: Recipe; `("finetune",)`: FinetuneSection), or None
    where a part of it is not a section."""
    model: type[BaseModel] = Recipe
    for part in path:
        info = model.model_fields.get(part)
        section = section_class(info.annotation) if info else None
        if section is None:
            return None
        model = section
    return model
