"""The recipe schema: the single source of truth for every key, its type, default, unit
and meaning. docs/recipe-reference.md is generated from it (`make docs`)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr


def field(default: Any, doc: str, unit: str | None = None, **constraints: Any) -> Any:
    """A schema field with its one-line doc and, where it has one, its unit."""
    extra = {"unit": unit} if unit else None
    if isinstance(default, type):
        return Field(default_factory=default, description=doc, json_schema_extra=extra)
    return Field(default, description=doc, json_schema_extra=extra, **constraints)


class Section(BaseModel):
    """A recipe section: unknown keys are errors, values are checked on assignment."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class ModelSection(Section):
    """The GPT-2 shape (configs/model/)."""

    name: str = field("gpt2-124m", "name of the model shape, as reported in run.json")
    num_layers: int = field(12, "transformer layers", "layers", gt=0)
    hidden_size: int = field(768, "hidden size", "elements", gt=0)
    num_attention_heads: int = field(12, "attention heads; must divide hidden_size", "heads", gt=0)
    seq_length: int = field(1024, "training sequence length", "tokens", gt=0)
    max_position_embeddings: int = field(
        1024, "learned position embeddings; at least seq_length", "positions", gt=0
    )
    vocab_size: int = field(50257, "tokenizer vocabulary before padding (GPT-2 BPE: 50257)", "tokens", gt=0)
    make_vocab_size_divisible_by: int = field(
        128, "Megatron pads the vocabulary to a multiple of this x tensor parallel size", "tokens", gt=0
    )
    attention_dropout: float = field(0.1, "dropout on attention probabilities", "probability", ge=0, lt=1)
    hidden_dropout: float = field(0.1, "dropout on hidden states", "probability", ge=0, lt=1)
    init_method_std: float = field(0.02, "standard deviation of the weight initialisation", gt=0)
    attention: Literal["megatron", "sdpa", "flash"] = field(
        "megatron",
        "how attention is computed, the same function each way. megatron: the engine's CoreAttention "
        "(a seq x seq score matrix per head, stored for the backward pass); sdpa: PyTorch's "
        "scaled_dot_product_attention (fused flash/memory-efficient kernels on GPU; any device, any "
        "precision), zerolab's patch sdpa_attention, enabled at launch by ZEROLAB_ATTENTION=sdpa; "
        "flash: the engine's FlashAttention-2 path (--use-flash-attn-v2): CUDA, bf16 or fp16, and the "
        "flash_attn package in the engine's environment",
    )


class ParallelSection(Section):
    """Model parallelism; data parallelism is what is left of the world size."""

    tensor: int = field(1, "tensor-parallel size (Megatron --tensor-model-parallel-size)", "ranks", gt=0)
    pipeline: int = field(
        1, "pipeline-parallel size (Megatron --pipeline-model-parallel-size)", "ranks", gt=0
    )


class ZeroSection(Section):
    """The ZeRO setup (configs/zero/), rendered into the ds_config and --zero-stage."""

    stage: Literal[0, 1, 2, 3] = field(0, "ZeRO stage: 0 off, 1 optimizer states, 2 + gradients, 3 + weights")
    offload_optimizer: bool = field(
        False, "keep optimizer states and step on the CPU (DeepSpeed CPU Adam); needs stage >= 1"
    )
    pin_memory: bool = field(
        True, "page-locked host memory for what is offloaded (optimizer states, weights)"
    )
    overlap_comm: bool = field(True, "overlap gradient reduction with the backward pass")
    contiguous_gradients: bool = field(True, "copy gradients into one contiguous buffer as they are made")
    reduce_bucket_size: int = field(
        500_000_000, "elements reduced at a time (stages 2 and 3)", "elements", gt=0
    )
    allgather_bucket_size: int = field(
        500_000_000,
        "elements gathered at a time; rendered at stages 1 and 2 only (stage 3 gathers by "
        "prefetch_bucket_size)",
        "elements",
        gt=0,
    )
    offload_param: bool = field(
        False,
        "stage 3 only: keep the partitioned weights on the CPU too (ds_config offload_param, Megatron "
        "--remote-device cpu), fetched to the device layer by layer",
    )
    prefetch_bucket_size: int | None = field(
        None,
        "stage 3 only: elements of weights fetched ahead of use (stage3_prefetch_bucket_size); "
        "null leaves DeepSpeed's default (5e7)",
        "elements",
        gt=0,
    )
    param_persistence_threshold: int | None = field(
        None,
        "stage 3 only: weights smaller than this stay whole on every rank "
        "(stage3_param_persistence_threshold); null leaves DeepSpeed's default (1e5)",
        "elements",
        ge=0,
    )
    max_live_parameters: int | None = field(
        None,
        "stage 3 only: gathered weights resident at once before they are released "
        "(stage3_max_live_parameters); null leaves DeepSpeed's default (1e9)",
        "elements",
        gt=0,
    )
    max_reuse_distance: int | None = field(
        None,
        "stage 3 only: a weight used again within this many elements is kept gathered "
        "(stage3_max_reuse_distance); null leaves DeepSpeed's default (1e9)",
        "elements",
        ge=0,
    )


class ActivationCheckpointingSection(Section):
    """Activation checkpointing (recomputation): keep fewer activations in the forward pass and
    recompute them in the backward pass, trading compute for memory (configs/activation_checkpointing/)."""

    granularity: Literal["none", "full", "selective"] = field(
        "none",
        "none: keep every activation; full: recompute whole transformer layers (Megatron "
        "--recompute-granularity full); selective: recompute only the attention core, the cheap part "
        "with the large seq x seq activations (--recompute-granularity selective)",
    )
    method: Literal["uniform", "block"] | None = field(
        None,
        "full only. uniform: checkpoint the input of every chunk of num_layers layers; block: "
        "recompute only the first num_layers layers of each pipeline stage (--recompute-method); "
        "null means uniform",
    )
    num_layers: int | None = field(
        None,
        "full only: layers per checkpointed chunk (uniform) or layers recomputed per pipeline stage "
        "(block) (--recompute-num-layers; --checkpoint-num-layers with the deepspeed implementation); "
        "null means 1",
        "layers",
        gt=0,
    )
    implementation: Literal["megatron", "deepspeed"] = field(
        "megatron",
        "full, uniform only: megatron recomputes with Megatron's own checkpointing; deepspeed with "
        "DeepSpeed's (--checkpoint-activations --deepspeed-activation-checkpointing and the ds_config "
        "activation_checkpointing block), which adds the three options below",
    )
    partition_activations: bool = field(
        False,
        "deepspeed implementation: split each checkpoint across the tensor-parallel ranks "
        "(--partition-activations)",
    )
    contiguous_memory: bool = field(
        False,
        "deepspeed implementation, with partition_activations: keep the checkpoints in one "
        "preallocated buffer (--contigious-checkpointing)",
    )
    cpu_checkpointing: bool = field(
        False,
        "deepspeed implementation: keep the checkpoints in host memory (--checkpoint-in-cpu)",
    )


class LoggingSection(Section):
    """Where training metrics go besides train.log: TensorBoard and Weights & Biases, written by
    the engine itself into the run directory."""

    tensorboard: bool = field(
        False,
        "write TensorBoard events to RUN_DIR/tensorboard (Megatron --tensorboard-dir, with timers and "
        "validation perplexity), every train.log_interval iterations",
    )
    wandb_project: str | None = field(
        None, "log to this Weights & Biases project (Megatron --wandb-project); null: no W&B"
    )
    wandb_name: str | None = field(None, "the W&B run name (--wandb-exp-name); null: the run's name")
    wandb_mode: Literal["online", "offline"] = field(
        "online", "W&B's WANDB_MODE: offline keeps the run in RUN_DIR/wandb, to `wandb sync` later"
    )


class ExtraSection(Section):
    """The escape hatch: engine settings the schema does not know, passed through unchanged.
    zerolab refuses what it renders itself (set those keys instead) and, where the engine is set
    up, has Megatron's parser and DeepSpeed's config classes check the result before launch."""

    megatron_args: list[str] = field(
        list, "extra pretrain_gpt.py arguments, appended as given, e.g. [--use-rotary-position-embeddings]"
    )
    ds_config: dict[str, Any] = field(
        dict, "extra DeepSpeed config keys, merged into the rendered ds_config (new keys only)"
    )


class PrecisionSection(Section):
    """Training number format (configs/precision/); both false is fp32."""

    bf16: bool = field(False, "train in bfloat16 (Megatron --bf16, ds_config bf16.enabled)")
    fp16: bool = field(False, "train in float16 with dynamic loss scaling (GPU only)")
    initial_scale_power: int = field(16, "fp16 only: the first loss scale is 2**this", "log2", ge=0)
    loss_scale_window: int = field(
        1000, "fp16 only: steps without overflow before raising the scale", "steps", gt=0
    )
    hysteresis: int = field(2, "fp16 only: overflows tolerated before lowering the scale", "steps", gt=0)
    min_loss_scale: float = field(1.0, "fp16 only: the loss scale never drops below this", gt=0)


class DataSection(Section):
    """The prepared dataset and tokenizer (configs/data/); relative paths are relative to the current
    directory."""

    name: str = field("dolly", "name of the dataset, as reported in summaries")
    path: str = field(
        "data/dolly_text_document", "Megatron data prefix: PREFIX.bin and PREFIX.idx", "path prefix"
    )
    prepare_command: str = field(
        "zerolab prep dolly --out data/dolly", "the command that writes the dataset, shown when it is missing"
    )
    split: str = field(
        "98,2,0",
        "train,validation,test weights over documents (Megatron --split)",
        pattern=r"^\d+(,\d+){0,2}$",
    )
    tokenizer_type: Literal["GPT2BPETokenizer"] = field("GPT2BPETokenizer", "Megatron tokenizer class")
    vocab_file: str | None = field(
        None,
        "GPT-2 BPE vocabulary (vocab.json); null: the one bundled with zerolab (zerolab/assets/gpt2)",
        "path",
    )
    merge_file: str | None = field(
        None,
        "GPT-2 BPE merges (merges.txt); null: the one bundled with zerolab (zerolab/assets/gpt2)",
        "path",
    )
    num_workers: int = field(2, "data-loader worker processes per rank", "processes", ge=0)


class TrainSection(Section):
    """Batch, length, optimizer and logging. Give exactly one of iters, tokens and epochs."""

    micro_batch_size: int = field(4, "sequences per rank per forward pass", "sequences", gt=0)
    global_batch_size: int = field(
        32, "sequences per optimizer step = micro x grad-accum x data parallel", "sequences", gt=0
    )
    gradient_accumulation_steps: int | None = field(
        None,
        "micro batches per step per rank; null derives it from the two batch sizes",
        "micro batches",
        gt=0,
    )
    iters: int | None = field(None, "training length as optimizer steps", "iterations", gt=0)
    tokens: int | None = field(
        None,
        "training length as tokens; rounded up to whole iterations of global x seq tokens",
        "tokens",
        gt=0,
    )
    epochs: float | None = field(
        None,
        "training length as passes over the training split of the prepared dataset (needs the data)",
        "epochs",
        gt=0,
    )
    lr: float = field(1.5e-4, "peak learning rate", "1/step", gt=0)
    min_lr: float = field(1.0e-5, "learning rate at the end of the decay", "1/step", ge=0)
    lr_decay_style: Literal["cosine", "linear", "constant"] = field(
        "cosine", "learning-rate decay after warm-up"
    )
    lr_warmup_iters: int = field(0, "linear learning-rate warm-up", "iterations", ge=0)
    weight_decay: float = field(0.1, "AdamW weight decay", ge=0)
    adam_beta1: float = field(0.9, "Adam beta1", gt=0, lt=1)
    adam_beta2: float = field(0.95, "Adam beta2", gt=0, lt=1)
    clip_grad: float = field(
        1.0, "gradient-norm clipping (Megatron --clip-grad, ds_config gradient_clipping)", ge=0
    )
    seed: int = field(1234, "random seed", ge=0)
    log_interval: int = field(
        10, "iterations between log lines (also the ds_config steps_per_print)", "iterations", gt=0
    )
    eval_interval: int = field(1000, "iterations between validation runs", "iterations", gt=0)
    eval_iters: int = field(10, "validation iterations per validation run", "iterations", ge=0)
    save_interval: int | None = field(
        None,
        "iterations between checkpoints, saved in the run directory's checkpoints/ (and at the end); "
        "null saves none. `zerolab launch --resume RUN_DIR` continues from the last one",
        "iterations",
        gt=0,
    )


class HardwareSection(Section):
    """Where it runs and how it is launched (configs/hardware/)."""

    device: Literal["cpu", "cuda"] = field("cuda", "cuda (NCCL) or cpu (DS_ACCELERATOR=cpu, gloo)")
    launcher: Literal["torchrun", "deepspeed"] = field("torchrun", "the program that starts the ranks")
    nodes: int = field(1, "machines", "nodes", gt=0)
    procs_per_node: int = field(2, "ranks per machine (one per GPU on cuda)", "processes", gt=0)
    world_size: int | None = field(
        None, "total ranks; when given it must equal nodes x procs_per_node", "processes", gt=0
    )
    node_rank: int = field(0, "this machine's rank (torchrun, multi-node)", ge=0)
    master_addr: str = field("127.0.0.1", "address of node 0 (multi-node)", "host")
    master_port: int = field(29500, "rendezvous port on node 0", "port", gt=0, lt=65536)
    hostfile: str | None = field(
        None, "DeepSpeed hostfile listing the nodes (deepspeed launcher, multi-node)", "path"
    )
    omp_num_threads: int | None = field(
        None, "OMP_NUM_THREADS for every rank; null leaves the launcher's default", "threads", gt=0
    )


class Recipe(Section):
    """A resolved recipe: building blocks from `base`, then the file's keys, then overrides."""

    base: list[str] = field(list, "building blocks under configs/, merged in order (e.g. model/gpt2-1.5b)")
    description: str = field("", "one line on what this recipe is for")
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
        """World size / (tensor x pipeline); valid after the checks passed."""
        return self.world_size // self.model_parallel_size

    @property
    def gradient_accumulation_steps(self) -> int:
        """Given, or global batch / (micro batch x data parallel)."""
        if self.train.gradient_accumulation_steps is not None:
            return self.train.gradient_accumulation_steps
        return self.train.global_batch_size // (self.train.micro_batch_size * self.data_parallel_size)

    @property
    def padded_vocab_size(self) -> int:
        """The vocabulary as Megatron pads it: up to a multiple of divisible-by x tensor parallel."""
        multiple = self.model.make_vocab_size_divisible_by * self.parallel.tensor
        return -(-self.model.vocab_size // multiple) * multiple

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
)
