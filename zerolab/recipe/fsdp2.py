"""The second engine, the job kind of a pretraining recipe with `engine: fsdp2`: zerolab's FSDP2 loop
(zerolab.rank.fsdp2_train) trains the recipe's GPT-2 with PyTorch's fully_shard (or DDP) on the
recipe's prepared dataset, in the engine's sample order and with its learning-rate schedule, from
the request.json rendered here. The zero section maps onto FSDP2 by ZERO_TO_FSDP2 (docs/engines.md
shows it); what has no counterpart is refused before launch (NOT_CARRIED_BY_FSDP2). Everything
about the data, its length and its inputs is pretraining's (zerolab.recipe.pretraining)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from zerolab import rundir
from zerolab.contracts import (
    ENGINE_GELU,
    ENGINE_LAYERNORM_EPSILON,
    FSDP2_TRAIN_MODULE,
    REQUEST_FILE,
    Fsdp2Request,
)
from zerolab.engine.paths import engine_dir
from zerolab.imported import layout_tag
from zerolab.recipe.inputs import blend
from zerolab.recipe.length import pretraining_iters, save_interval
from zerolab.recipe.pretraining import Pretraining, schedule
from zerolab.recipe.resumption import Resume
from zerolab.recipe.schema import Recipe

ADAM_EPS = 1e-8
"""Megatron's --adam-eps default, which every pretraining recipe trains with."""
HF_ATTENTION = {"megatron": "eager", "sdpa": "sdpa"}
"""model.attention as transformers' attn_implementation (the engine's own attention is the eager one)."""


@dataclass(frozen=True)
class Fsdp2Setup:
    """How one zero setup is trained by FSDP2."""

    sharding: str
    reshard_after_forward: bool
    cpu_offload: bool

    def describe(self) -> str:
        """The setup in FSDP2's words, for the render's summary line and run.json."""
        if self.sharding == "ddp":
            return "DDP"
        kept = (
            "resharded after forward" if self.reshard_after_forward else "kept between forward and backward"
        )
        return f"fully_shard, weights {kept}" + (", CPUOffloadPolicy" if self.cpu_offload else "")


def fsdp2_setup(recipe: Recipe) -> Fsdp2Setup:
    """The zero section as FSDP2 trains it: stage 0 replicated (DDP); stages 1 and 2 sharded with the
    gathered weights kept from forward to backward (FSDP2 shards gradients too: ZeRO-1's whole
    gradients have no counterpart, so z1 trains as z2); stage 3 resharded after each layer's
    forward; either offload as CPUOffloadPolicy (weights, gradients and optimizer states on the host)."""
    zero = recipe.zero
    if zero.stage == 0:
        return Fsdp2Setup("ddp", reshard_after_forward=False, cpu_offload=False)
    offload = zero.offload_optimizer or zero.offload_param
    return Fsdp2Setup("fsdp2", reshard_after_forward=zero.stage == 3, cpu_offload=offload)


ZERO_TO_FSDP2: tuple[tuple[str, str], ...] = (
    ("zero.stage 0", "DistributedDataParallel: whole weights, gradients averaged"),
    (
        "zero.stage 1",
        "fully_shard(reshard_after_forward=False): trains as stage 2, FSDP2 shards gradients too",
    ),
    ("zero.stage 2", "fully_shard(reshard_after_forward=False): weights gathered once per step"),
    ("zero.stage 3", "fully_shard(reshard_after_forward=True): each layer's weights freed after its forward"),
    ("zero.offload_optimizer / zero.offload_param", "offload_policy=CPUOffloadPolicy()"),
    ("precision bf16", "mp_policy=MixedPrecisionPolicy(param_dtype=bfloat16, reduce_dtype=float32)"),
    ("activation_checkpointing full (uniform, 1 layer)", "torch.utils.checkpoint of every GPT-2 block"),
)
"""The mapping docs/engines.md tables: a recipe key and what the FSDP2 loop does for it."""


_DATA_PARALLEL_ONLY = (
    "the FSDP2 loop trains data parallel only (one device mesh dimension, every rank a shard): tensor, "
    "pipeline and sequence parallelism are Megatron's"
)
_DEEPSPEED_BUCKETS = (
    "DeepSpeed's bucket, prefetch and persistence knobs: FSDP2 gathers and reduce-scatters one layer's "
    "unit at a time, overlapped by its own streams, and offloads all of a unit (no ratio)"
)
_MEGATRON_RECOMPUTE = (
    "the FSDP2 loop recomputes every GPT-2 block whole (torch.utils.checkpoint): Megatron's selective, "
    "block and multi-layer recomputation and DeepSpeed's activation partitioning have no counterpart"
)
_NOT_WRITTEN_YET = "not written by the FSDP2 loop yet: its log lines are train.log's"
_MEGATRON_ONLY = "a feature of Megatron-DeepSpeed's model or training loop, which the FSDP2 loop does not run"
NOT_CARRIED_BY_FSDP2: dict[str, tuple[tuple[str, ...], str]] = {
    "parallel": (
        ("tensor", "pipeline", "sequence", "sequence_fpdt", "sequence_fpdt_chunk_size"),
        _DATA_PARALLEL_ONLY,
    ),
    "zero": (
        (
            "offload_ratio",
            "overlap_comm",
            "contiguous_gradients",
            "reduce_bucket_size",
            "allgather_bucket_size",
            "prefetch_bucket_size",
            "param_persistence_threshold",
            "max_live_parameters",
            "max_reuse_distance",
        ),
        _DEEPSPEED_BUCKETS,
    ),
    "activation_checkpointing": (
        (
            "method",
            "num_layers",
            "implementation",
            "partition_activations",
            "contiguous_memory",
            "cpu_checkpointing",
        ),
        _MEGATRON_RECOMPUTE,
    ),
    "model": (("rotary", "rotary_percent", "rotary_theta"), _MEGATRON_ONLY),
    "train": (
        (
            "samples",
            "rampup_batch_size",
            "max_tokens",
            "lr_warmup_tokens",
            "lr_decay_tokens",
            "exit_duration_mins",
            "exit_interval",
            "prescale_gradients",
        ),
        _MEGATRON_ONLY,
    ),
    "precision": (("grad_accum_dtype",), "DeepSpeed's gradient accumulation format: FSDP2 reduces in fp32"),
    "logging": (
        (
            "tensorboard",
            "wandb_project",
            "wandb_name",
            "tensorboard_queue_size",
            "log_batch_size",
            "log_optimizer_states",
            "timing_log_level",
            "flops_profiler_step",
            "flops_profiler_top_modules",
            "wall_clock_breakdown",
        ),
        _NOT_WRITTEN_YET,
    ),
    "extra": (
        ("megatron_args", "ds_config"),
        "arguments of Megatron's parser and keys of DeepSpeed's config",
    ),
    "speed": ((), "zerolab's speed switches patch Megatron-DeepSpeed's code"),
    "moe": ((), "DeepSpeed's mixture of experts is built into Megatron's model"),
    "curriculum": ((), "DeepSpeed's curriculum hands Megatron's model a length at each step"),
    "distillation": ((), _MEGATRON_ONLY),
}
"""What an FSDP2 recipe cannot carry, by section: the keys (none listed: all of the section's) and why.
A value other than the schema's default is refused before launch, naming the key (zerolab.recipe.checks),
unless it is AS_FSDP2_DOES."""
AS_FSDP2_DOES: dict[str, dict[str, Any]] = {
    "activation_checkpointing": {"method": "uniform", "num_layers": 1}
}
"""Values of NOT_CARRIED_BY_FSDP2's keys that say what the loop does anyway: every block recomputed on
its own is Megatron's uniform recomputation of one layer a chunk (activation_checkpointing/full)."""


class Fsdp2Training(Pretraining):
    """A pretraining recipe's job on the second engine: what differs from Megatron's (the data,
    inputs, length and model shape are pretraining's)."""

    entry_module = FSDP2_TRAIN_MODULE
    reads_ds_config = False
    """FSDP2 is no DeepSpeed: its ds_config.json is {}."""
    engine_judges_extras = False
    """No Megatron arguments nor DeepSpeed config to judge: the checks refuse both extras."""

    def program_args(
        self, run_dir: str, *, engine: str | None, resume: Resume | None, load_own_checkpoints: bool
    ) -> list[str]:
        """The loop's one argument, its request.json in the run directory."""
        return [f"{run_dir}/{REQUEST_FILE}"]

    def request(self, *, engine: str | None, resume: Resume | None) -> Fsdp2Request:
        """The request.json of the recipe (see fsdp2_request)."""
        return fsdp2_request(self.recipe, engine=engine, resume=resume)

    def steps_before(self, *, engine: str | None, resume: Resume | None) -> tuple[tuple[str, ...], ...]:
        """Nothing: an FSDP2 run resumes from its own checkpoints as they are."""
        return ()

    def env(self) -> dict[str, str]:
        """Nothing beyond the common environment (no Megatron patch reads a variable here)."""
        return {}

    def ds_config(self) -> dict[str, Any]:
        """None of DeepSpeed's keys: the loop reads no ds_config."""
        return {}

    def attention_label(self) -> str:
        """model.attention as transformers names it."""
        return HF_ATTENTION.get(self.recipe.model.attention, self.recipe.model.attention)

    def full_recompute_label(self) -> str:
        """Every GPT-2 block recomputed, as torch.utils.checkpoint does it."""
        return "full, every block (torch.utils.checkpoint)"

    def run_facts(self) -> dict[str, Any]:
        """The engine and the FSDP2 setup the zero section became."""
        return {"engine": "fsdp2", "fsdp2_setup": fsdp2_setup(self.recipe).describe()}


def fsdp2_request(recipe: Recipe, *, engine: str | None = None, resume: Resume | None = None) -> Fsdp2Request:
    """The request.json of an FSDP2 recipe: the model as GPT2Config (the engine's padded vocabulary,
    GeLU and epsilon), the dataset keys as Megatron's words, the batches, optimizer and schedule, the
    setup of fsdp2_setup."""
    model, train, data = recipe.model, recipe.train, recipe.data
    setup = fsdp2_setup(recipe)
    init = None
    if model.init_from is not None:
        init = str(Path(model.init_from) / layout_tag(1, 1))
    load = str(resume.run_dir / rundir.CHECKPOINTS_DIR) if resume is not None else None
    return Fsdp2Request(
        engine=engine or str(engine_dir()),
        model={
            "vocab_size": recipe.padded_vocab_size,
            "n_positions": model.max_position_embeddings,
            "n_embd": model.hidden_size,
            "n_layer": model.num_layers,
            "n_head": model.num_attention_heads,
            "activation_function": ENGINE_GELU,
            "layer_norm_epsilon": ENGINE_LAYERNORM_EPSILON,
            "resid_pdrop": model.hidden_dropout,
            "embd_pdrop": model.hidden_dropout,
            "attn_pdrop": model.attention_dropout,
            "initializer_range": model.init_method_std,
            "tie_word_embeddings": True,
        },
        init_from=init,
        data_path=_words(data.path),
        split=data.split,
        train_data_path=_words(data.train_path),
        valid_data_path=_words(data.valid_path),
        test_data_path=_words(data.test_path),
        data_impl=data.impl or "infer",
        seq_length=model.seq_length,
        seed=train.seed,
        micro_batch_size=train.micro_batch_size,
        global_batch_size=train.global_batch_size,
        train_iters=pretraining_iters(recipe),
        lr=train.lr,
        min_lr=train.min_lr,
        lr_decay_style=train.lr_decay_style,
        lr_warmup_iters=train.lr_warmup_iters,
        weight_decay=train.weight_decay,
        adam_beta1=train.adam_beta1,
        adam_beta2=train.adam_beta2,
        adam_eps=ADAM_EPS,
        clip_grad=train.clip_grad,
        log_interval=train.log_interval,
        eval_interval=train.eval_interval,
        eval_iters=train.eval_iters,
        save_interval=save_interval(recipe),
        load=load,
        override_scheduler=resume is not None and schedule(resume.recipe) != schedule(recipe),
        sharding=setup.sharding,
        reshard_after_forward=setup.reshard_after_forward,
        cpu_offload=setup.cpu_offload,
        precision=recipe.precision_name,
        recompute=recipe.activation_checkpointing.granularity == "full",
        attention=HF_ATTENTION.get(model.attention, "eager"),
    )


def _words(value: str | None) -> list[str] | None:
    """A dataset key as Megatron's nargs flag reads it: a prefix, or a blend's words."""
    if value is None:
        return None
    return value.split() if blend(value) else [value]
