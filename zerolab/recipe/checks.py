"""Cross-key checks run before anything launches: each problem names its keys and the fix."""

from __future__ import annotations

import shlex
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from zerolab.contracts import FLASH_V2
from zerolab.data_prep.tokenizer import HF, MEGATRON_SENTENCEPIECE, MODEL_TOKENIZERS, SENTENCEPIECE
from zerolab.errors import UserError
from zerolab.locations import CONFIGS_DIR, RECIPES_DIR, display_path
from zerolab.recipe.destinations import Megatron, destinations
from zerolab.recipe.finetuning import FineTuning
from zerolab.recipe.fsdp2 import AS_FSDP2_DOES, NOT_CARRIED_BY_FSDP2, Fsdp2Training
from zerolab.recipe.inputs import (
    BUNDLED_TOKENIZER_FILES,
    DATASET_KEYS,
    TOKENIZER_FILE_FIX,
    blend,
    blend_problem,
    vocabulary_size,
)
from zerolab.recipe.job import job_of, train_iters
from zerolab.recipe.pretraining import Pretraining, attention_args
from zerolab.recipe.provenance import Sources, source_of
from zerolab.recipe.render import ds_config, render, stage_bound
from zerolab.recipe.schema import (
    MEGATRON_EXPERT_INTERVAL,
    NODE_PLACING_BACKENDS,
    CurriculumSection,
    DataSection,
    DistillationSection,
    ExtraSection,
    MoeSection,
    Recipe,
    SpeedSection,
    section_class,
)


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a recipe: the keys involved, what is wrong, how to fix it."""

    keys: tuple[str, ...]
    message: str
    fix: str

    def describe(self, recipe: Recipe, sources: Sources) -> str:
        """The problem as message lines, each key with its value and the file or override that set it."""
        shown = ", ".join(
            f"{key}={_value(recipe, key)!r} ({source_of(sources, tuple(key.split('.')))})"
            for key in self.keys
        )
        keys = f"\n    keys: {shown}" if shown else ""
        return f"- {self.message}{keys}\n    fix: {self.fix}"


def _value(recipe: Recipe, key: str) -> Any:
    node: Any = recipe
    for part in key.split("."):
        node = getattr(node, part)
    return node


Check = Callable[[Recipe], "Problem | None"]
CHECKS: list[Check] = []


def check(function: Check) -> Check:
    """Register a check."""
    CHECKS.append(function)
    return function


RENDEZVOUS_CHECKS: list[Check] = []
"""Checks of how nodes find each other, which a scheduler (SLURM) answers for itself."""


def rendezvous_check(function: Check) -> Check:
    """Register a check of how nodes find each other."""
    RENDEZVOUS_CHECKS.append(function)
    return check(function)


TOKENIZER_CHECKS: list[Check] = []
"""Checks of the model against its tokenizer, which settings read back from a log (the padded
vocabulary, no tokenizer of their own) cannot answer."""


def tokenizer_check(function: Check) -> Check:
    """Register a check of the model against its tokenizer."""
    TOKENIZER_CHECKS.append(function)
    return check(function)


ONLY_FOR: dict[Check, type] = {}
"""The checks of one job kind (zerolab.recipe.job), with that kind: recipes of the other skip them."""


def only_for(kind: type) -> Callable[[Check], Check]:
    """Register a check as one of `kind`'s only (above its @check)."""

    def register(function: Check) -> Check:
        ONLY_FOR[function] = kind
        return function

    return register


FINETUNING_CHECKS: list[Check] = []
"""Checks of a fine-tuning recipe against the pretraining keys it cannot take: all of them fail at
once when a pretraining recipe is given a `finetune` key (finetune_switch)."""


def finetuning_check(function: Check) -> Check:
    """Register a check of a fine-tuning recipe against pretraining's keys."""
    FINETUNING_CHECKS.append(function)
    return only_for(FineTuning)(check(function))


def check_recipe(
    recipe: Recipe,
    *,
    rendezvous_known: bool = True,
    tokenizer_known: bool = True,
    sources: Sources | None = None,
) -> list[Problem]:
    """Every problem the checks find (empty when the recipe can be rendered). Where
    hardware.backend places the nodes itself (a SLURM job), or without `rendezvous_known` (settings
    read from a log), how nodes find each other is not checked; without `tokenizer_known` (settings
    read from a log), the model is not checked against the tokenizer. With the `sources` of its
    keys, a pretraining recipe made a fine-tuning one by a `finetune` key (finetune_switch) gets
    one problem naming that key, not one per pretraining key it holds."""
    placed = recipe.hardware.backend in NODE_PLACING_BACKENDS
    job = job_of(recipe)
    skipped = [
        *(RENDEZVOUS_CHECKS if placed or not rendezvous_known else []),
        *([] if tokenizer_known else TOKENIZER_CHECKS),
        *(function for function, kind in ONLY_FOR.items() if not isinstance(job, kind)),
    ]
    found = [
        (function, problem)
        for function in CHECKS
        if function not in skipped and (problem := function(recipe)) is not None
    ]
    switched = [problem for function, problem in found if function in FINETUNING_CHECKS]
    switch = finetune_switch(sources) if sources is not None and switched else None
    if switch is None or not switched:
        return [problem for _, problem in found]
    made = _made_finetuning(recipe, switch, switched, sources or {})
    kept = [problem for function, problem in found if function not in FINETUNING_CHECKS]
    return [made, *kept]


def finetune_switch(sources: Sources) -> dict[str, list[str]] | None:
    """What made a recipe a fine-tuning one when its building blocks did not: each file or override
    that set a `finetune` key, with the keys it set; None when a block of the recipe's `base` set one
    (the recipe is a fine-tuning one by its blocks)."""
    blocks = f"{display_path(CONFIGS_DIR)}/"
    setters: dict[str, list[str]] = {}
    for path, source in sources.items():
        if path[:1] != ("finetune",):
            continue
        if source.startswith(blocks) and "(override `" not in source:
            return None
        setters.setdefault(source, []).append(".".join(path))
    return setters or None


def _made_finetuning(
    recipe: Recipe, switch: dict[str, list[str]], problems: list[Problem], sources: Sources
) -> Problem:
    """The one problem of a pretraining recipe that a `finetune` key made a fine-tuning one."""
    overrides = [source for source in switch if "override `" in source]
    files = [source for source in switch if "override `" not in source]
    causes = [f"the `finetune` section of {source} ({', '.join(switch[source])})" for source in files]
    causes += [_override_of(source) for source in overrides]
    cause = " and ".join(causes)
    refused = [
        key
        for problem in problems
        for key in problem.keys
        if source_of(sources, tuple(key.split("."))) != "schema default"
    ]
    pretraining = ", ".join(dict.fromkeys(refused))
    given = [_override_of(source).removeprefix("override ").strip("`") for source in overrides]
    carried = [shlex.quote(override) for override in given if override.startswith("finetune.")]
    example = shlex.join(["zerolab", "render", _finetuning_twin(recipe)]) + "".join(f" {o}" for o in carried)
    undo = " and ".join(
        [
            *(f"drop the {_override_of(source)}" for source in overrides),
            *(f"remove the `finetune` section from {source}" for source in files),
        ]
    )
    return Problem(
        tuple(key for keys in switch.values() for key in keys if key != "finetune"),  # not `finetune: {}`
        f"{cause} made this pretraining recipe a fine-tuning one: a recipe with a `finetune` section "
        "fine-tunes a Hugging Face GPT-2 on a GLUE task instead of pretraining (docs/fine-tuning.md), "
        f"and fine-tuning refuses the pretraining keys it holds ({pretraining})",
        f"to pretrain, {undo}; to fine-tune, start from a fine-tuning recipe (recipes/finetune/, whose "
        f"base is finetune/glue and train/glue or train/tiny-glue), e.g. `{example}`",
    )


def _override_of(source: str) -> str:
    """`override `KEY=VALUE`` of a source that is an override or a block an override merged."""
    return source[source.index("override `") :].rstrip(")")


def _finetuning_twin(recipe: Recipe) -> str:
    """The shipped fine-tuning recipe closest to `recipe`: on its device, with its ZeRO setup."""
    zero = recipe.zero
    setup = "dp" if zero.stage == 0 else f"z{zero.stage}" + ("_offload" if zero.offload_optimizer else "")
    family = "finetune/cpu/tiny_wnli" if recipe.hardware.device == "cpu" else "finetune/gpt2_xl_mrpc"
    name = f"{family}_{setup}"
    return name if (RECIPES_DIR / f"{name}.yaml").is_file() else f"{family}_dp"


@check
def _world_size_matches(recipe: Recipe) -> Problem | None:
    hw = recipe.hardware
    if hw.world_size is None or hw.world_size == hw.nodes * hw.procs_per_node:
        return None
    return Problem(
        ("hardware.world_size", "hardware.nodes", "hardware.procs_per_node"),
        f"world size {hw.world_size} is not nodes x processes per node = {hw.nodes * hw.procs_per_node}",
        f"set hardware.world_size={hw.nodes * hw.procs_per_node} or remove it, "
        "or change nodes/procs_per_node",
    )


def _split_ranks(recipe: Recipe) -> int:
    """Ranks that train one batch together: tensor x pipeline x sequence."""
    return recipe.model_parallel_size * recipe.parallel.sequence


def _split_keys(recipe: Recipe) -> tuple[str, ...]:
    """The parallel keys that split a batch's work: tensor, pipeline (and sequence where it splits)."""
    return (
        "parallel.tensor",
        "parallel.pipeline",
        *(("parallel.sequence",) if recipe.parallel.sequence > 1 else ()),
    )


def _keys_text(keys: tuple[str, ...]) -> str:
    """`a, b and c`."""
    return ", ".join(keys[:-1]) + f" and {keys[-1]}" if len(keys) > 1 else keys[0]


@check
def _model_parallel_divides_world(recipe: Recipe) -> Problem | None:
    if recipe.world_size % _split_ranks(recipe) == 0:
        return None
    product = "tensor x pipeline" + (" x sequence" if recipe.parallel.sequence > 1 else "")
    return Problem(
        (*_split_keys(recipe), "hardware.nodes", "hardware.procs_per_node"),
        f"world size {recipe.world_size} is not divisible by {product} = {_split_ranks(recipe)}, "
        "so there is no whole data-parallel size",
        f"choose {_keys_text(_split_keys(recipe))} whose product divides nodes x procs_per_node",
    )


@check
def _sequence_parallel_divides(recipe: Recipe) -> Problem | None:
    size, model = recipe.parallel.sequence, recipe.model
    if size == 1:
        return None
    heads = model.num_attention_heads // recipe.parallel.tensor
    if model.seq_length % size == 0 and heads % size == 0:
        return None
    return Problem(
        ("parallel.sequence", "model.seq_length", "model.num_attention_heads", "parallel.tensor"),
        f"sequence parallel {size} must divide the sequence length ({model.seq_length}) and the "
        f"{heads} attention heads of a tensor rank: Ulysses gives each rank seq_length / {size} tokens, "
        f"then heads / {size} heads over the whole sequence",
        "set parallel.sequence to a common divisor of model.seq_length and the heads per tensor rank",
    )


@check
def _sequence_parallel_engine(recipe: Recipe) -> Problem | None:
    if recipe.parallel.sequence == 1 or recipe.parallel.pipeline == 1:
        return None
    return Problem(
        ("parallel.sequence", "parallel.pipeline"),
        "DeepSpeed-Ulysses runs without the pipeline engine: Megatron-DeepSpeed hands its "
        "sequence-parallel groups to DeepSpeed only with --no-pipeline-parallel",
        "set parallel.pipeline=1 with parallel.sequence above 1",
    )


@check
def _global_batch_consistent(recipe: Recipe) -> Problem | None:
    if recipe.world_size % _split_ranks(recipe):
        return None
    train = recipe.train
    dp = recipe.data_parallel_size
    per_step = train.micro_batch_size * dp
    keys = ("train.global_batch_size", "train.micro_batch_size", *_split_keys(recipe))
    if train.gradient_accumulation_steps is None:
        if train.global_batch_size % per_step == 0:
            return None
        return Problem(
            keys,
            f"global batch {train.global_batch_size} is not a multiple of micro batch "
            f"{train.micro_batch_size} "
            f"x data parallel {dp} = {per_step}",
            f"set train.global_batch_size to a multiple of {per_step}, e.g. "
            f"{max(1, (train.global_batch_size + per_step // 2) // per_step) * per_step}",
        )
    expected = per_step * train.gradient_accumulation_steps
    if train.global_batch_size == expected:
        return None
    return Problem(
        (*keys, "train.gradient_accumulation_steps"),
        f"global batch {train.global_batch_size} != micro batch {train.micro_batch_size} "
        "x gradient accumulation "
        f"{train.gradient_accumulation_steps} x data parallel {dp} = {expected}",
        f"set train.global_batch_size={expected}, or remove train.gradient_accumulation_steps to derive it",
    )


@only_for(Pretraining)  # fine-tuning: the model's own tokenizer and config.json give model.vocab_size
@tokenizer_check
def _vocab_size_is_the_tokenizers(recipe: Recipe) -> Problem | None:
    try:
        counted = vocabulary_size(recipe)
    except ValueError as error:
        key = "tokenizer_model" if recipe.data.tokenizer_type in MODEL_TOKENIZERS else "vocab_file"
        return Problem((f"data.{key}",), str(error), TOKENIZER_FILE_FIX[key])
    if counted is None or recipe.model.vocab_size == counted[0]:
        return None
    entries, what, key = counted
    return Problem(
        ("model.vocab_size", "data.tokenizer_type", f"data.{key}"),
        f"model.vocab_size {recipe.model.vocab_size} is not the size of the tokenizer's vocabulary: "
        f"{what} has {entries} entries. Megatron takes the vocabulary from the tokenizer "
        "(model.vocab_size reaches no flag), so FLOPs, MFU and the memory estimate would count "
        "another model than the one trained",
        f"set model.vocab_size={entries}",
    )


@check
def _tokenizer_files_are_the_types(recipe: Recipe) -> Problem | None:
    data = recipe.data
    if data.tokenizer_type in MODEL_TOKENIZERS:
        given = [key for key in BUNDLED_TOKENIZER_FILES if getattr(data, key) is not None]
        reads = MODEL_READ[data.tokenizer_type]
        if data.tokenizer_model is None:
            return Problem(
                ("data.tokenizer_type", "data.tokenizer_model"),
                f"{data.tokenizer_type} reads {reads}, and data.tokenizer_model is null",
                f"set data.tokenizer_model to the {reads} the dataset was prepared with (`zerolab prep ... "
                "--tokenizer-model FILE_OR_FOLDER`)",
            )
        if given:
            return Problem(
                ("data.tokenizer_type", *(f"data.{key}" for key in given)),
                f"{', '.join(f'data.{key}' for key in given)}: GPT-2's BPE files, which "
                f"{data.tokenizer_type} does not read",
                f"remove {', '.join(f'data.{key}' for key in given)}",
            )
    elif data.tokenizer_model is not None:
        return Problem(
            ("data.tokenizer_type", "data.tokenizer_model"),
            f"data.tokenizer_model {data.tokenizer_model}: a SentencePiece model or a Hugging Face folder, "
            f"which {data.tokenizer_type} does not read",
            "remove data.tokenizer_model, or set data.tokenizer_type=GPTSentencePieceTokenizer (a "
            "tokenizer.model) or HFTokenizer (a folder), with a dataset prepared by `zerolab prep ... "
            "--tokenizer-model FILE_OR_FOLDER`",
        )
    return None


MODEL_READ = {
    SENTENCEPIECE: "a SentencePiece model (tokenizer.model)",
    MEGATRON_SENTENCEPIECE: "a SentencePiece model (tokenizer.model)",
    HF: "a Hugging Face tokenizer folder",
}
"""What each class of MODEL_TOKENIZERS reads as data.tokenizer_model."""


@check
def _heads_divide_hidden(recipe: Recipe) -> Problem | None:
    model = recipe.model
    if model.hidden_size % model.num_attention_heads == 0:
        return None
    return Problem(
        ("model.hidden_size", "model.num_attention_heads"),
        f"hidden size {model.hidden_size} is not divisible by {model.num_attention_heads} attention heads",
        "choose a head count that divides model.hidden_size (GPT-2: 768/12, 1024/16, 1280/20, 1600/25)",
    )


@check
def _tensor_divides_heads(recipe: Recipe) -> Problem | None:
    if recipe.model.num_attention_heads % recipe.parallel.tensor == 0:
        return None
    return Problem(
        ("parallel.tensor", "model.num_attention_heads"),
        f"tensor parallel {recipe.parallel.tensor} does not divide "
        f"{recipe.model.num_attention_heads} attention heads",
        "set parallel.tensor to a divisor of model.num_attention_heads",
    )


@check
def _pipeline_divides_layers(recipe: Recipe) -> Problem | None:
    if recipe.model.num_layers % recipe.parallel.pipeline == 0:
        return None
    return Problem(
        ("parallel.pipeline", "model.num_layers"),
        f"pipeline parallel {recipe.parallel.pipeline} does not divide "
        f"{recipe.model.num_layers} layers into equal stages",
        "set parallel.pipeline to a divisor of model.num_layers",
    )


@check
def _sequence_fits_positions(recipe: Recipe) -> Problem | None:
    model = recipe.model
    if model.seq_length <= model.max_position_embeddings:
        return None
    return Problem(
        ("model.seq_length", "model.max_position_embeddings"),
        f"sequence length {model.seq_length} exceeds the {model.max_position_embeddings} position embeddings",
        f"lower model.seq_length or raise model.max_position_embeddings to {model.seq_length}",
    )


@check
def _zero_with_pipeline(recipe: Recipe) -> Problem | None:
    if recipe.zero.stage < 2 or recipe.parallel.pipeline == 1:
        return None
    return Problem(
        ("zero.stage", "parallel.pipeline"),
        f"ZeRO stage {recipe.zero.stage} cannot shard gradients across pipeline stages "
        f"(pipeline parallel {recipe.parallel.pipeline}); DeepSpeed refuses it",
        "use zero.stage 0 or 1 with pipeline parallelism, or set parallel.pipeline=1",
    )


@check
def _offload_needs_zero(recipe: Recipe) -> Problem | None:
    if not recipe.zero.offload_optimizer or recipe.zero.stage >= 1:
        return None
    return Problem(
        ("zero.offload_optimizer", "zero.stage"),
        "optimizer offload needs ZeRO stage 1 or higher (stage 0 keeps no optimizer partition to offload)",
        "set zero.stage to 1, 2 or 3, or zero.offload_optimizer=false",
    )


@check
def _hpz_within_a_node(recipe: Recipe) -> Problem | None:
    size, hw = recipe.zero.hpz_partition_size, recipe.hardware
    if size is None or size == 1 or (hw.procs_per_node % size == 0 and recipe.data_parallel_size % size == 0):
        return None
    return Problem(
        ("zero.hpz_partition_size", "hardware.procs_per_node"),
        f"hpZ partition {size} must divide the ranks of a node ({hw.procs_per_node}) and the data-parallel "
        f"ranks ({recipe.data_parallel_size}): DeepSpeed keeps the secondary copy of the weights within "
        "each group of that many consecutive ranks, which is a node's only where the node holds whole groups",
        f"set zero.hpz_partition_size to a divisor of {hw.procs_per_node} (the ranks of a node, as the "
        "ZeRO++ tutorial does)",
    )


@check
def _mics_shards(recipe: Recipe) -> Problem | None:
    zero, hw = recipe.zero, recipe.hardware
    size = zero.mics_shard_size
    if size is None:
        return None
    if recipe.data_parallel_size % size:
        return Problem(
            ("zero.mics_shard_size",),
            f"MiCS shard {size} must divide the data-parallel ranks ({recipe.data_parallel_size}): DeepSpeed "
            "replicates whole shards across them (runtime/zero/mics_utils.py create_mics_comm_groups)",
            f"set zero.mics_shard_size to a divisor of {recipe.data_parallel_size}",
        )
    if zero.mics_hierarchical_params_gather and size <= hw.procs_per_node:
        return Problem(
            ("zero.mics_hierarchical_params_gather", "zero.mics_shard_size", "hardware.procs_per_node"),
            f"hierarchical gather with a MiCS shard of {size} ranks, within one node of {hw.procs_per_node}: "
            "DeepSpeed asserts 'sharding spans on single node, no need for hierarchy allgather' "
            "(runtime/zero/mics_utils.py) at the start",
            "remove zero.mics_hierarchical_params_gather, or make the shard span nodes (zero.mics_shard_size "
            "a multiple of the ranks of a node)",
        )
    return None


@check
def _quantized_zeropp_can_act(recipe: Recipe) -> Problem | None:
    zero, hw = recipe.zero, recipe.hardware
    asked = [key for key in ("quantized_weights", "quantized_gradients") if getattr(zero, key)]
    if not asked:
        return None
    if hw.device == "cpu":
        return Problem(
            ("hardware.device", *(f"zero.{key}" for key in asked)),
            f"{', '.join(asked)} (ZeRO++ qwZ/qgZ) quantize with DeepSpeed's CUDA quantizer op "
            "(QuantizerBuilder), which the CPU accelerator does not provide: DeepSpeed stops at "
            "deepspeed.initialize (qwZ) or at the first backward pass (qgZ)",
            "remove them on CPU (zero=z3_hpz keeps ZeRO++'s hpZ, which runs here); `zerolab doctor` says "
            "whether a machine can run them",
        )
    if zero.quantized_gradients and hw.nodes == 1:
        return Problem(
            ("zero.quantized_gradients", "hardware.nodes"),
            "qgZ on one node: DeepSpeed's ZeRO-3 takes the quantized reduce only across nodes (runtime/zero/"
            "stage3.py: num_nodes > 1), so the run would be plain ZeRO-3 under a ZeRO++ name",
            "remove zero.quantized_gradients on one node, or run on several (hardware.nodes)",
        )
    return None


@check
def _one_half_precision(recipe: Recipe) -> Problem | None:
    if not (recipe.precision.fp16 and recipe.precision.bf16):
        return None
    return Problem(
        ("precision.fp16", "precision.bf16"),
        "fp16 and bf16 are exclusive",
        "set one of precision.fp16 and precision.bf16 to false (merge precision=bf16, fp16 or fp32)",
    )


@check
def _no_fp16_on_cpu(recipe: Recipe) -> Problem | None:
    if not (recipe.precision.fp16 and recipe.hardware.device == "cpu"):
        return None
    return Problem(
        ("precision.fp16", "hardware.device"),
        "fp16 is not supported on CPU (DeepSpeed: 'Type fp16 is not supported on your device')",
        "use precision=bf16 or precision=fp32 on CPU",
    )


@check
def _one_dataset_layout(recipe: Recipe) -> Problem | None:
    data = recipe.data
    if (data.path is None) != (data.train_path is None):
        return None
    if data.path is None:
        return Problem(
            ("data.path", "data.train_path"),
            "no training data: data.path and data.train_path are both null",
            "set data.path to a prepared dataset, or data.train_path to a `zerolab prep --split` output",
        )
    return Problem(
        ("data.path", "data.train_path", "data.valid_path", "data.test_path"),
        "give one dataset layout: data.path (dealt by data.split) or the split datasets "
        "(data.train_path, valid_path, test_path), not both (Megatron takes one or the other)",
        "set data.path=null to use the split datasets, or data.train_path=null",
    )


@check
def _split_datasets_need_a_training_one(recipe: Recipe) -> Problem | None:
    data = recipe.data
    if data.train_path is not None or (data.valid_path is None and data.test_path is None):
        return None
    return Problem(
        ("data.valid_path", "data.test_path", "data.train_path"),
        "a validation or test dataset without a training one (data.train_path)",
        "set data.train_path to the training split (OUT_train_text_document)",
    )


LENGTH_KEYS = ("iters", "tokens", "epochs", "samples")
"""The train keys that give a pretraining's length, one of them."""


@check
def _data_blends_pair_weights_and_prefixes(recipe: Recipe) -> Problem | None:
    for key in DATASET_KEYS:
        value = getattr(recipe.data, key)
        wrong = blend_problem(value) if value is not None and blend(value) is not None else None
        if wrong is not None:
            return Problem(
                (f"data.{key}",),
                f"data.{key} {value!r} is read as a weighted blend of datasets: {wrong}",
                f"write data.{key} as one prefix (no spaces), or as `W1 PREFIX1 W2 PREFIX2 ...`, each "
                "weight a number above 0",
            )
    return None


def _lengths_given(recipe: Recipe) -> list[str]:
    """The train keys among LENGTH_KEYS that the recipe sets."""
    return [key for key in LENGTH_KEYS if getattr(recipe.train, key) is not None]


@only_for(Pretraining)  # fine-tuning: _finetune_length_in_epochs
@check
def _one_training_length(recipe: Recipe) -> Problem | None:
    given = _lengths_given(recipe)
    if len(given) == 1:
        return None
    return Problem(
        tuple(f"train.{key}" for key in LENGTH_KEYS),
        "give the training length exactly once: as iterations, tokens, epochs or samples"
        + (f" (got {', '.join(given)})" if given else ""),
        "keep one of train.iters, train.tokens, train.epochs, train.samples and set the others to null",
    )


@only_for(Pretraining)
@check
def _sample_based_warmup(recipe: Recipe) -> Problem | None:
    train = recipe.train
    if train.samples is None or train.lr_warmup_iters == 0:
        return None
    return Problem(
        ("train.samples", "train.lr_warmup_iters"),
        "Megatron's sample-based training (train.samples) refuses a warm-up in iterations",
        "give the warm-up as train.lr_warmup_tokens and set train.lr_warmup_iters=0, or the length as "
        "train.iters",
    )


@only_for(Pretraining)
@check
def _one_warmup(recipe: Recipe) -> Problem | None:
    train = recipe.train
    if train.lr_warmup_tokens is None or train.lr_warmup_iters == 0:
        return None
    return Problem(
        ("train.lr_warmup_tokens", "train.lr_warmup_iters"),
        "the warm-up is given twice; the engine would warm up over the tokens and ignore the iterations",
        "keep one of train.lr_warmup_tokens and train.lr_warmup_iters (0)",
    )


@only_for(Pretraining)
@check
def _warmup_tokens_within_decay(recipe: Recipe) -> Problem | None:
    train = recipe.train
    if train.lr_decay_tokens is None or (train.lr_warmup_tokens or 0) < train.lr_decay_tokens:
        return None
    return Problem(
        ("train.lr_warmup_tokens", "train.lr_decay_tokens"),
        f"the warm-up ({train.lr_warmup_tokens} tokens) does not end before the decay does "
        f"({train.lr_decay_tokens} tokens): the engine's schedule divides by their difference",
        "set train.lr_warmup_tokens below train.lr_decay_tokens",
    )


@only_for(Pretraining)
@check
def _rampup_batch_size(recipe: Recipe) -> Problem | None:
    train = recipe.train
    if train.rampup_batch_size is None:
        return None
    keys = ("train.rampup_batch_size", "train.samples", "train.global_batch_size")
    start, increment, ramp = train.rampup_batch_size
    if train.samples is None:
        return Problem(
            keys[:2],
            "Megatron ramps the batch size up over a sample-based length only",
            "give the length as train.samples, or remove train.rampup_batch_size",
        )
    per_step = train.micro_batch_size * max(1, recipe.data_parallel_size)
    wrong = (
        "its start must be at least 1 and below the global batch"
        if not 0 < start < train.global_batch_size
        else "its increment must be at least 1 and divide global batch - start"
        if increment < 1 or (train.global_batch_size - start) % increment
        else "its samples must be at least 1"
        if ramp < 1
        else f"each batch of the ramp must be a multiple of micro batch x data parallel = {per_step}"
        if start % per_step or increment % per_step
        else None
    )
    if wrong is None:
        return None
    return Problem(
        (*keys, "train.micro_batch_size"),
        f"batch-size ramp-up [start, increment, samples] = {list(train.rampup_batch_size)} up to global "
        f"batch {train.global_batch_size}: {wrong}",
        f"e.g. train.rampup_batch_size=[{per_step}, {per_step}, {max(ramp, 1)}]",
    )


@check
def _one_save_interval(recipe: Recipe) -> Problem | None:
    train = recipe.train
    if train.save_interval is None or train.save_interval_epochs is None:
        return None
    return Problem(
        ("train.save_interval", "train.save_interval_epochs"),
        "give the checkpoint interval once: in iterations or in epochs",
        "keep one of train.save_interval and train.save_interval_epochs and set the other to null",
    )


@check
def _warmup_shorter_than_training(recipe: Recipe) -> Problem | None:

    train = recipe.train
    given = _lengths_given(recipe)
    if len(given) != 1:
        return None  # the one-length check reports it
    try:
        iters = train_iters(recipe)
    except UserError:
        return None  # epochs of a dataset not prepared yet: counted (and checked) at launch
    if train.lr_warmup_iters < iters:
        return None
    length = f"train.{given[0]}" + ("" if given[0] == "iters" else f" = {iters} iteration(s)")
    return Problem(
        ("train.lr_warmup_iters", f"train.{given[0]}"),
        f"learning-rate warm-up ({train.lr_warmup_iters} iterations) does not end before training does "
        f"({length})",
        f"lower train.lr_warmup_iters below {iters}, or train longer",
    )


@check
def _min_lr_below_lr(recipe: Recipe) -> Problem | None:
    if recipe.train.min_lr <= recipe.train.lr:
        return None
    return Problem(
        ("train.min_lr", "train.lr"),
        f"the final learning rate {recipe.train.min_lr} is above the peak {recipe.train.lr}",
        "set train.min_lr at or below train.lr",
    )


@check
def _node_rank_in_range(recipe: Recipe) -> Problem | None:
    hw = recipe.hardware
    if hw.node_rank < hw.nodes:
        return None
    return Problem(
        ("hardware.node_rank", "hardware.nodes"),
        f"node rank {hw.node_rank} is not below the {hw.nodes} node(s)",
        f"set hardware.node_rank between 0 and {hw.nodes - 1}",
    )


@rendezvous_check
def _multi_node_rendezvous(recipe: Recipe) -> Problem | None:
    hw = recipe.hardware
    if hw.nodes == 1:
        return None
    if hw.launcher == "deepspeed" and hw.hostfile is None:
        return Problem(
            ("hardware.hostfile", "hardware.launcher", "hardware.nodes"),
            f"the deepspeed launcher needs a hostfile to find {hw.nodes} nodes",
            "set hardware.hostfile to a file of `hostname slots=N` lines, or use hardware.launcher=torchrun",
        )
    if hw.launcher == "torchrun" and hw.master_addr in ("127.0.0.1", "localhost"):
        return Problem(
            ("hardware.master_addr", "hardware.launcher", "hardware.nodes"),
            f"torchrun on {hw.nodes} nodes needs node 0's address; "
            f"{hw.master_addr} only reaches this machine",
            "set hardware.master_addr to node 0's hostname or IP, and hardware.node_rank on each node",
        )
    return None


@check
def _hostfile_needs_deepspeed(recipe: Recipe) -> Problem | None:
    hw = recipe.hardware
    if hw.hostfile is None or hw.launcher == "deepspeed":
        return None
    return Problem(
        ("hardware.hostfile", "hardware.launcher"),
        "only the deepspeed launcher reads a hostfile",
        "set hardware.launcher=deepspeed, or remove hardware.hostfile and give master_addr/node_rank",
    )


@check
def _full_only_options(recipe: Recipe) -> Problem | None:
    ckpt = recipe.activation_checkpointing
    given = [key for key in ("method", "num_layers") if getattr(ckpt, key) is not None]
    if ckpt.granularity == "full" or not given:
        return None
    return Problem(
        ("activation_checkpointing.granularity", *(f"activation_checkpointing.{key}" for key in given)),
        f"{' and '.join(given)} apply to full recomputation only; granularity {ckpt.granularity} "
        "would ignore them",
        "set activation_checkpointing.granularity=full, or remove "
        + " and ".join(f"activation_checkpointing.{key}" for key in given),
    )


@check
def _deepspeed_checkpointing_is_uniform(recipe: Recipe) -> Problem | None:
    ckpt = recipe.activation_checkpointing
    if ckpt.implementation == "megatron" or (ckpt.granularity == "full" and ckpt.method != "block"):
        return None
    return Problem(
        (
            "activation_checkpointing.implementation",
            "activation_checkpointing.granularity",
            "activation_checkpointing.method",
        ),
        "DeepSpeed's activation checkpointing recomputes whole layers in uniform chunks only",
        "use granularity=full with method uniform (or null), or implementation=megatron",
    )


@check
def _deepspeed_checkpointing_options(recipe: Recipe) -> Problem | None:
    ckpt = recipe.activation_checkpointing
    given = [
        key
        for key in ("partition_activations", "contiguous_memory", "cpu_checkpointing")
        if getattr(ckpt, key)
    ]
    if not given or ckpt.implementation == "deepspeed":
        return None
    return Problem(
        ("activation_checkpointing.implementation", *(f"activation_checkpointing.{key}" for key in given)),
        f"{', '.join(given)}: options of DeepSpeed's activation checkpointing, which is not in use",
        "set activation_checkpointing.implementation=deepspeed (with granularity=full), or turn them off",
    )


@check
def _contiguous_needs_partitioning(recipe: Recipe) -> Problem | None:
    ckpt = recipe.activation_checkpointing
    if not ckpt.contiguous_memory or ckpt.partition_activations:
        return None
    return Problem(
        ("activation_checkpointing.contiguous_memory", "activation_checkpointing.partition_activations"),
        "DeepSpeed keeps checkpoints in one contiguous buffer only when it partitions them",
        "set activation_checkpointing.partition_activations=true, or contiguous_memory=false",
    )


@check
def _recompute_layers_fit_stage(recipe: Recipe) -> Problem | None:
    ckpt = recipe.activation_checkpointing
    if ckpt.granularity != "full" or recipe.model.num_layers % recipe.parallel.pipeline:
        return None
    per_stage = recipe.model.num_layers // recipe.parallel.pipeline
    layers = ckpt.num_layers or 1
    keys = ("activation_checkpointing.num_layers", "model.num_layers", "parallel.pipeline")
    if ckpt.method == "block":
        if layers <= per_stage:
            return None
        return Problem(
            (*keys, "activation_checkpointing.method"),
            f"block recomputation of {layers} layers per pipeline stage, but a stage has {per_stage}",
            f"set activation_checkpointing.num_layers to at most {per_stage}",
        )
    if per_stage % layers == 0:
        return None
    return Problem(
        keys,
        f"uniform recomputation in chunks of {layers} layers does not divide the {per_stage} layers "
        "of a pipeline stage",
        "set activation_checkpointing.num_layers to a divisor of model.num_layers / parallel.pipeline",
    )


@check
def _block_recompute_without_pipeline(recipe: Recipe) -> Problem | None:
    ckpt = recipe.activation_checkpointing
    if ckpt.method != "block" or recipe.parallel.pipeline == 1:
        return None
    return Problem(
        ("activation_checkpointing.method", "parallel.pipeline"),
        "DeepSpeed's pipeline engine recomputes in uniform chunks only; with block it would "
        "recompute nothing",
        "use activation_checkpointing.method=uniform with pipeline parallelism",
    )


@check
def _offload_param_needs_stage3(recipe: Recipe) -> Problem | None:
    if not recipe.zero.offload_param or recipe.zero.stage == 3:
        return None
    return Problem(
        ("zero.offload_param", "zero.stage"),
        "weights can be offloaded only when ZeRO stage 3 partitions them",
        "set zero.stage=3 (e.g. zero=z3_offload_param), or zero.offload_param=false",
    )


@check
def _stage3_knobs_need_stage3(recipe: Recipe) -> Problem | None:

    given = [key for key in stage_bound(3) if getattr(recipe.zero, key) is not None]
    if not given or recipe.zero.stage == 3:
        return None
    return Problem(
        ("zero.stage", *(f"zero.{key}" for key in given)),
        f"{', '.join(given)}: DeepSpeed reads these at ZeRO stage 3 only",
        "set zero.stage=3, or remove " + " and ".join(f"zero.{key}" for key in given),
    )


@check
def _tensorboard_options_need_tensorboard(recipe: Recipe) -> Problem | None:
    logging = recipe.logging
    given = [
        name
        for name in ("tensorboard_queue_size", "log_batch_size", "log_optimizer_states")
        if getattr(logging, name) not in (None, False)
    ]
    if not given or logging.tensorboard:
        return None
    return Problem(
        ("logging.tensorboard", *(f"logging.{name}" for name in given)),
        f"{', '.join(given)}: options of TensorBoard logging, which is off: nothing would be logged",
        "set logging.tensorboard=true, or remove them",
    )


@check
def _rotary_options_need_rotary(recipe: Recipe) -> Problem | None:
    model = recipe.model
    given = [name for name in ("rotary_percent", "rotary_theta") if getattr(model, name) is not None]
    if not given or model.rotary:
        return None
    return Problem(
        ("model.rotary", *(f"model.{name}" for name in given)),
        f"{', '.join(given)}: options of rotary position embeddings, which are off: Megatron reads them "
        "only with --use-rotary-position-embeddings",
        "set model.rotary=true, or remove them",
    )


@check
def _offload_ratio_needs_a_stage_3_optimizer_offload(recipe: Recipe) -> Problem | None:
    zero = recipe.zero
    if zero.offload_ratio is None or (zero.offload_optimizer and zero.stage == 3):
        return None
    return Problem(
        ("zero.offload_ratio", "zero.offload_optimizer", "zero.stage"),
        "offload_ratio: the share of an offloaded optimizer that DeepSpeed steps on the CPU, read only by "
        "ZeRO-3 with offload_optimizer (its stage3 optimizer's Twin-Flow)",
        "set zero.stage=3 and zero.offload_optimizer=true (zero=z3_offload), or remove zero.offload_ratio",
    )


@check
def _fpdt_needs_cuda(recipe: Recipe) -> Problem | None:
    if not recipe.parallel.sequence_fpdt or recipe.hardware.device == "cuda":
        return None
    return Problem(
        ("parallel.sequence_fpdt", "hardware.device"),
        "FPDT's attention (DeepSpeed's sequence/fpdt_layer.py) calls the flash_attn package's kernels, "
        "which run on CUDA GPUs only",
        "set parallel.sequence_fpdt=false (Ulysses without FPDT, parallel.sequence, trains on CPU too), or "
        "hardware.device=cuda",
    )


@check
def _fpdt_options_need_fpdt(recipe: Recipe) -> Problem | None:
    parallel = recipe.parallel
    given = [
        name
        for name, value in (
            ("sequence_fpdt_chunk_size", parallel.sequence_fpdt_chunk_size),
            ("sequence_fpdt_offloading", parallel.sequence_fpdt_offloading),
        )
        if value not in (None, False)
    ]
    if not given or parallel.sequence_fpdt:
        return None
    return Problem(
        ("parallel.sequence_fpdt", *(f"parallel.{name}" for name in given)),
        f"{', '.join(given)}: options of FPDT, which is off: Megatron reads them only with "
        "--ds-sequence-parallel-fpdt",
        "set parallel.sequence_fpdt=true, or remove them",
    )


ZERO_BUBBLE_FLAGS = ("--enable-zbh1-pipeline", "--enable-zbh1-exact-semantics")


@check
def _zero_bubble_pipeline_stops_at_its_first_step(recipe: Recipe) -> Problem | None:
    given = [flag for flag in ZERO_BUBBLE_FLAGS if flag in recipe.extra.megatron_args]
    if not given:
        return None
    return Problem(
        ("extra.megatron_args",),
        f"{', '.join(given)}: the engine's zero-bubble pipeline (megatron/core/pipeline_parallel/"
        "deepspeed_zbh1_engine.py) calls PipelineEngine.mem_status, which the pinned DeepSpeed no longer "
        "has: the launch stops at its first backward pass (AttributeError; measured on CPU, pipeline 2)",
        "remove them: parallel.pipeline trains DeepSpeed's 1F1B schedule",
    )


@check
def _grouped_query_attention_stops_at_its_first_step(recipe: Recipe) -> Problem | None:
    args = recipe.extra.megatron_args
    if "--num-key-value-heads" not in args[:-1]:
        return None
    groups = args[args.index("--num-key-value-heads") + 1]
    if groups == str(recipe.model.num_attention_heads):
        return None
    return Problem(
        ("extra.megatron_args", "model.num_attention_heads"),
        f"--num-key-value-heads {groups} with {recipe.model.num_attention_heads} attention heads: the "
        "engine's attention (megatron/model/transformer.py ParallelAttention.forward) cuts the fused "
        "query-key-value output in three equal parts, or with DeepSpeed sequence parallelism asserts "
        "that keys are as wide as queries, so grouped-query attention stops at the first forward pass "
        "(RuntimeError: shape ... is invalid; measured on CPU)",
        "remove --num-key-value-heads (every head its own keys and values)",
    )


@check
def _flops_profiler_options_need_a_step(recipe: Recipe) -> Problem | None:
    logging = recipe.logging
    if logging.flops_profiler_top_modules is None or logging.flops_profiler_step is not None:
        return None
    return Problem(
        ("logging.flops_profiler_step", "logging.flops_profiler_top_modules"),
        "flops_profiler_top_modules: an option of the flops profiler, which profiles no step",
        "set logging.flops_profiler_step to the iteration to profile, or remove it",
    )


@check
def _grad_accum_dtype_without_zero_is_the_training_format(recipe: Recipe) -> Problem | None:
    dtype = recipe.precision.grad_accum_dtype
    if dtype is None or recipe.zero.stage > 0 or dtype == recipe.precision_name:
        return None
    return Problem(
        ("precision.grad_accum_dtype", "zero.stage", "precision.bf16", "precision.fp16"),
        f"without ZeRO, DeepSpeed accumulates gradients in the training format ({recipe.precision_name}) "
        f"only: its engine refuses {dtype} (NotImplementedError: unsupported mix of model_dtype and "
        "grad_accum_dtype)",
        f"set zero.stage to 1 or higher (bf16 with fp32 accumulation: stage 1), or "
        f"precision.grad_accum_dtype={recipe.precision_name} (or null)",
    )


@check
def _wandb_name_needs_project(recipe: Recipe) -> Problem | None:
    if recipe.logging.wandb_name is None or recipe.logging.wandb_project is not None:
        return None
    return Problem(
        ("logging.wandb_name", "logging.wandb_project"),
        "a W&B run name without a W&B project: nothing would be logged to W&B",
        "set logging.wandb_project, or remove logging.wandb_name",
    )


@check
def _flash_needs_cuda(recipe: Recipe) -> Problem | None:
    if not recipe.model.attention.startswith("flash") or recipe.hardware.device == "cuda":
        return None
    return Problem(
        ("model.attention", "hardware.device"),
        "the engine's FlashAttention path (the flash_attn package) runs on CUDA GPUs only",
        "use model.attention=sdpa (PyTorch's fused attention, on CPU too) or megatron on "
        "hardware.device=cpu, or hardware.device=cuda",
    )


@check
def _flash_needs_half_precision(recipe: Recipe) -> Problem | None:
    if not recipe.model.attention.startswith("flash") or recipe.precision_name != "fp32":
        return None
    return Problem(
        ("model.attention", "precision.bf16", "precision.fp16"),
        "the engine's FlashAttention path computes in bf16 or fp16 only; in fp32 its first step fails",
        "use precision=bf16 (or fp16), or model.attention=sdpa in fp32",
    )


@check
def _flash_has_no_selective_recompute(recipe: Recipe) -> Problem | None:
    if (
        not recipe.model.attention.startswith("flash")
        or recipe.activation_checkpointing.granularity != "selective"
    ):
        return None
    return Problem(
        ("model.attention", "activation_checkpointing.granularity"),
        "selective recomputation recomputes the engine's CoreAttention, which the flash path does not "
        "use: the engine would silently recompute nothing",
        "set activation_checkpointing.granularity=none (flash keeps no seq x seq activations) or full, "
        "or model.attention=sdpa",
    )


ATTENTION_FLAGS = frozenset(
    {
        "--use-flash-attn",
        "--use-flash-attn-v1",
        FLASH_V2,
        "--use-flash-attn-triton",
        "--use-flash-attn-builder",
    }
)
"""Engine options that choose the attention implementation: model.attention's business."""


@check
def _attention_chosen_by_model_attention(recipe: Recipe) -> Problem | None:

    given = {token.split("=", 1)[0] for token in recipe.extra.megatron_args}
    flags = sorted(
        given & ATTENTION_FLAGS - set(attention_args(recipe))
    )  # a rendered one: _extra_args_not_rendered
    if not flags:
        return None
    return Problem(
        ("extra.megatron_args", "model.attention"),
        f"{', '.join(flags)}: the attention implementation is chosen by model.attention",
        "remove them from extra.megatron_args and set model.attention (flash: the engine's "
        "FlashAttention-2, sdpa: PyTorch's fused attention)",
    )


@check
def _fused_attention_has_one_causal_mask(recipe: Recipe) -> Problem | None:
    given = {token.split("=", 1)[0] for token in recipe.extra.megatron_args}
    if recipe.model.attention == "megatron" or "--reset-attention-mask" not in given:
        return None
    return Problem(
        ("model.attention", "extra.megatron_args"),
        f"model.attention={recipe.model.attention} applies one causal mask to the whole sequence; "
        "--reset-attention-mask asks for a mask per document",
        "use model.attention=megatron with --reset-attention-mask, or remove it",
    )


MOE_OPTIONS = tuple(name for name in MoeSection.model_fields if name not in ("num_experts", "loss_coeff"))
"""The moe keys that only layers with experts read (moe.loss_coeff: upstream's dense scripts pass it)."""


@only_for(Pretraining)
@check
def _moe_options_need_experts(recipe: Recipe) -> Problem | None:
    return _options_while_off(
        recipe,
        "moe",
        MOE_OPTIONS,
        on=recipe.moe.enabled,
        switch="moe.num_experts",
        what="options of the experts, and moe.num_experts gives every layer one (a dense model)",
        fix="set moe.num_experts above 1, or remove them",
    )


@only_for(Pretraining)
@check
def _moe_layers_and_their_experts(recipe: Recipe) -> Problem | None:
    moe, layers = recipe.moe, recipe.model.num_layers
    experts, interval = moe.experts, moe.expert_interval or MEGATRON_EXPERT_INTERVAL
    keys = ("moe.num_experts", "moe.expert_interval", "model.num_layers")
    if min(experts) < 1:
        return Problem(keys[:1], "every MoE layer needs at least 1 expert", "give counts of 1 or more")
    if not moe.enabled:
        return None
    moe_layers = layers // interval
    if moe_layers == 0:
        return Problem(
            keys,
            f"one layer in {interval} is an MoE layer (moe.expert_interval) and the model has {layers}: "
            "none would get experts",
            f"set moe.expert_interval to at most {layers}",
        )
    if len(experts) in (1, moe_layers):
        return None
    return Problem(
        keys,
        f"moe.num_experts gives {len(experts)} counts; the model has {moe_layers} MoE layers (one in "
        f"{interval} of {layers}), and the engine takes one count for all or one for each",
        f"give one count, or {moe_layers}",
    )


@only_for(Pretraining)
@check
def _experts_spread_over_data_parallel_ranks(recipe: Recipe) -> Problem | None:
    moe = recipe.moe
    size = moe.expert_parallel or 1
    if not moe.enabled or size == 1:
        return None
    dp = recipe.data_parallel_size
    uneven = sorted({count for count in moe.experts if count > 1 and count % size})
    if recipe.world_size % _split_ranks(recipe) == 0 and dp % size:
        return Problem(
            ("moe.expert_parallel", "hardware.procs_per_node", "hardware.nodes", *_split_keys(recipe)),
            f"expert parallel {size} must divide the data-parallel size {dp}: DeepSpeed draws each "
            "expert-parallel group from ranks that train different tokens",
            f"set moe.expert_parallel to a divisor of {dp}",
        )
    if uneven:
        return Problem(
            ("moe.expert_parallel", "moe.num_experts"),
            f"expert parallel {size} must divide each MoE layer's experts ({', '.join(map(str, uneven))} do "
            "not divide): DeepSpeed gives each rank experts / expert parallel of them",
            "set moe.expert_parallel to a common divisor of moe.num_experts, or the counts to multiples "
            f"of {size}",
        )
    return None


@only_for(Pretraining)
@check
def _experts_under_zero(recipe: Recipe) -> Problem | None:
    moe, stage = recipe.moe, recipe.zero.stage
    if not moe.enabled or stage == 0 or (stage in (1, 2) and moe.param_group):
        return None
    if stage == 3:
        return Problem(
            ("moe.num_experts", "zero.stage"),
            "DeepSpeed's MoE layers do not train under ZeRO stage 3 (its engine refuses them)",
            "use zero.stage 0, 1 or 2 with experts",
        )
    return Problem(
        ("moe.param_group", "zero.stage"),
        f"with experts, ZeRO stage {stage} needs the experts' weights in optimizer groups of their own "
        "(DeepSpeed refuses an optimizer without them)",
        "set moe.param_group=true",
    )


@only_for(Pretraining)
@check
def _experts_route_within_their_count(recipe: Recipe) -> Problem | None:
    moe = recipe.moe
    fewest = min(count for count in moe.experts if count > 1) if moe.enabled else 0
    if not moe.enabled or (moe.topk or 1) <= fewest:
        return None
    return Problem(
        ("moe.topk", "moe.num_experts"),
        f"each token goes to its top {moe.topk} experts, and an MoE layer has only {fewest}",
        f"set moe.topk to at most {fewest}",
    )


@only_for(Pretraining)
@check
def _curriculum_options_need_it(recipe: Recipe) -> Problem | None:
    return _options_while_off(
        recipe,
        "curriculum",
        [name for name in CurriculumSection.model_fields if name != "enabled"],
        on=recipe.curriculum.enabled,
        switch="curriculum.enabled",
        what="options of the curriculum, which is off",
        fix="set curriculum.enabled=true, or remove them",
    )


@only_for(Pretraining)
@check
def _curriculum_lengths(recipe: Recipe) -> Problem | None:
    cl, seq = recipe.curriculum, recipe.model.seq_length
    if not cl.enabled:
        return None
    missing = [name for name in ("min_seq_length", "steps") if getattr(cl, name) is None]
    if missing:
        return Problem(
            tuple(f"curriculum.{name}" for name in missing),
            f"a curriculum needs {' and '.join(missing)}: where it starts and how many iterations it "
            "grows over",
            "set " + " and ".join(f"curriculum.{name}" for name in missing),
        )
    top = cl.max_seq_length or seq
    if cl.min_seq_length is not None and cl.min_seq_length < top <= seq:
        return None
    return Problem(
        ("curriculum.min_seq_length", "curriculum.max_seq_length", "model.seq_length"),
        f"the curriculum grows from {cl.min_seq_length} to {top} tokens; it must start below where it ends, "
        f"and end at most at the sequences' {seq}",
        f"set curriculum.min_seq_length below {top} and curriculum.max_seq_length at most {seq} "
        f"(null: {seq})",
    )


@only_for(Pretraining)
@check
def _curriculum_root_degree(recipe: Recipe) -> Problem | None:
    cl = recipe.curriculum
    if not cl.enabled or (cl.schedule == "fixed_root") == (cl.root_degree is not None):
        return None
    return Problem(
        ("curriculum.schedule", "curriculum.root_degree"),
        "curriculum.root_degree is the fixed_root schedule's, and only that schedule's",
        "set curriculum.schedule=fixed_root with a root_degree, or remove root_degree",
    )


@only_for(Pretraining)
@check
def _curriculum_of_whole_sequences(recipe: Recipe) -> Problem | None:
    if not recipe.curriculum.enabled or recipe.parallel.sequence == 1:
        return None
    return Problem(
        ("curriculum.enabled", "parallel.sequence"),
        "the curriculum cuts the sequences each rank holds to its length, and DeepSpeed-Ulysses gives each "
        "rank a part of every sequence: the parts would be cut, not the sequences",
        "set curriculum.enabled=false or parallel.sequence=1",
    )


@only_for(Pretraining)
@check
def _curriculum_through_extra(recipe: Recipe) -> Problem | None:
    block = recipe.extra.ds_config.get("curriculum_learning")
    if not isinstance(block, dict) or block.get("enabled") is not True:
        return None
    if block.get("curriculum_type") != "seqlen" or block.get("schedule_type") not in (
        "fixed_linear",
        "fixed_root",
    ):
        return None
    return Problem(
        ("extra.ds_config",),
        "extra.ds_config curriculum_learning: the curriculum section renders a seqlen curriculum",
        "set the curriculum section's keys instead (docs/recipe-reference.md)",
    )


TEACHER_SHAPE = ("teacher", "teacher_num_layers", "teacher_hidden_size", "teacher_num_attention_heads")
"""The distillation keys the engine needs to build and load the teacher (Megatron has no default)."""


@only_for(Pretraining)
@check
def _distillation_options_need_it(recipe: Recipe) -> Problem | None:
    return _options_while_off(
        recipe,
        "distillation",
        [name for name in DistillationSection.model_fields if name not in ("kd", "mos")],
        on=recipe.distillation.enabled,
        switch="distillation.kd",
        what="options of distillation, which is off (distillation.kd and mos false)",
        fix="set distillation.kd=true, or remove them",
    )


@only_for(Pretraining)
@check
def _distillation_names_its_teacher(recipe: Recipe) -> Problem | None:
    kd = recipe.distillation
    if not kd.enabled:
        return None
    if kd.kd and kd.mos:
        return Problem(
            ("distillation.kd", "distillation.mos"),
            "kd and mos are two names of one distillation",
            "set one of distillation.kd and distillation.mos",
        )
    missing = [name for name in TEACHER_SHAPE if getattr(kd, name) is None]
    if missing:
        return Problem(
            tuple(f"distillation.{name}" for name in missing),
            f"distillation needs its teacher's checkpoint and shape: {', '.join(missing)} not given",
            "set "
            + " and ".join(f"distillation.{name}" for name in missing)
            + " (the teacher run's model keys)",
        )
    if recipe.zero.stage == 3:
        return Problem(
            ("distillation.kd", "zero.stage"),
            "under ZeRO-3 the engine builds the student partitioned (zero.Init), then loads it in a "
            "DeepSpeed engine without ZeRO (zerolab's distillation_student_wrapped_once, as the engine "
            "loads the teacher): not a setup zerolab runs",
            "set zero.stage to 0, 1 or 2 to distil",
        )
    if recipe.parallel.pipeline == 1:
        return None
    return Problem(
        ("distillation.kd", "parallel.pipeline"),
        "the engine loads the teacher without the pipeline engine only ('Weight loading only mode is not "
        "supported in pipeline parallelism')",
        "set parallel.pipeline=1 to distil",
    )


@check
def _extra_args_are_options(recipe: Recipe) -> Problem | None:
    args = recipe.extra.megatron_args
    if not args or args[0].startswith("--"):
        return None
    return Problem(
        ("extra.megatron_args",),
        f"extra Megatron arguments must start with an option (--name), not {args[0]!r}",
        "write them as a list of tokens, e.g. [--eod-mask-loss, --adam-eps, '1e-6']",
    )


@check
def _extra_args_not_rendered(recipe: Recipe) -> Problem | None:

    given = {token.split("=", 1)[0] for token in recipe.extra.megatron_args if token.startswith("--")}
    if not given:
        return None
    try:
        rendered = render(recipe.model_copy(update={"extra": ExtraSection()})).argv
    except UserError:  # the length in epochs needs the data: compare without it
        rendered = []
    clashes = sorted(given & {token for token in rendered if token.startswith("--")})
    return _rendered_already("extra.megatron_args", clashes) if clashes else None


PASSED_THROUGH = frozenset({"--load"})
"""Flags a schema key renders in one use that extra.megatron_args may still pass for another
(--load: model.init_from's imported weights; a checkpoint of the user's own is passed as given)."""


def declared_flags() -> dict[str, str]:
    """Each Megatron flag the schema declares on a pretraining section's key, with that key."""
    flags: dict[str, str] = {}
    for section, info in Recipe.model_fields.items():
        model = section_class(info.annotation)
        if model is None or section in ("extra", "finetune"):
            continue
        for name, field_info in model.model_fields.items():
            for destination in destinations(field_info):
                if isinstance(destination, Megatron) and destination.flag.startswith("--"):
                    flags.setdefault(destination.flag, f"{section}.{name}")
    return flags


@check
def _extra_args_a_key_renders(recipe: Recipe) -> Problem | None:

    given = {token.split("=", 1)[0] for token in recipe.extra.megatron_args if token.startswith("--")}
    declared = declared_flags()
    owned = sorted(flag for flag in given - PASSED_THROUGH - ATTENTION_FLAGS if flag in declared)
    if not owned:
        return None
    try:
        rendered = set(render(recipe.model_copy(update={"extra": ExtraSection()})).argv)
    except UserError:  # no length, or epochs of data not prepared: the flags alone say it
        rendered = set()
    owned = [flag for flag in owned if flag not in rendered]  # rendered ones: _extra_args_not_rendered
    if not owned:
        return None
    keys = list(dict.fromkeys(declared[flag] for flag in owned))
    return Problem(
        ("extra.megatron_args", *keys),
        ", ".join(f"{flag}: the recipe key {declared[flag]} renders it" for flag in owned),
        f"remove {'them' if len(owned) > 1 else 'it'} from extra.megatron_args and set "
        + " and ".join(keys)
        + " (docs/recipe-reference.md)",
    )


@check
def _extra_ds_config_adds_only(recipe: Recipe) -> Problem | None:

    extra = recipe.extra.ds_config
    if not extra:
        return None
    clashes = _replaced_keys(ds_config(recipe.model_copy(update={"extra": ExtraSection()})), extra)
    return _rendered_already("extra.ds_config", clashes) if clashes else None


def _rendered_already(key: str, clashes: list[str]) -> Problem:
    """`key` passes on settings that zerolab renders from the recipe's own keys."""
    return Problem(
        (key,),
        f"{', '.join(clashes)}: rendered from the recipe's own keys already",
        f"remove {'them' if len(clashes) > 1 else 'it'} from {key} and set the recipe keys that render "
        f"{'them' if len(clashes) > 1 else 'it'} (docs/recipe-reference.md)",
    )


def _replaced_keys(rendered: dict[str, Any], extra: dict[str, Any], prefix: str = "") -> list[str]:
    """Dotted ds_config keys of `extra` that would replace a value in `rendered`."""
    clashes = []
    for key, value in extra.items():
        if key not in rendered:
            continue
        if isinstance(value, dict) and isinstance(rendered[key], dict):
            clashes += _replaced_keys(rendered[key], value, f"{prefix}{key}.")
        else:
            clashes.append(f"{prefix}{key}")
    return clashes


@finetuning_check
def _finetune_attention(recipe: Recipe) -> Problem | None:
    if recipe.model.attention not in ("flash-v1", "flash-triton"):
        return None
    return Problem(
        ("model.attention",),
        f"model.attention={recipe.model.attention} is a path of Megatron's attention; a fine-tuning runs "
        "Hugging Face's GPT-2",
        "use model.attention=flash (FlashAttention-2), sdpa or megatron",
    )


@finetuning_check
def _finetune_length_in_epochs(recipe: Recipe) -> Problem | None:
    train = recipe.train
    whole_epochs = train.epochs is not None and train.epochs.is_integer()
    if train.iters is None and train.tokens is None and whole_epochs:
        return None
    return Problem(
        ("train.epochs", "train.iters", "train.tokens"),
        "fine-tuning trains whole epochs over the task's training file, given as train.epochs",
        "set train.epochs to a whole number (e.g. 3) and train.iters and train.tokens to null",
    )


@finetuning_check
def _finetune_schedule_ends_at_zero(recipe: Recipe) -> Problem | None:
    if recipe.train.min_lr == 0:
        return None
    return Problem(
        ("train.min_lr",),
        "fine-tuning's learning-rate schedules (transformers', as Hugging Face's Trainer uses them) "
        "decay to 0 after the warm-up",
        "set train.min_lr=0",
    )


NOT_READ_BY_FINETUNING: dict[str, tuple[str, ...]] = {
    "parallel": (
        "tensor",
        "pipeline",
        "sequence_fpdt",
        "sequence_fpdt_chunk_size",
        "sequence_fpdt_offloading",
    ),
    "model": (
        "make_vocab_size_divisible_by",
        "masked_softmax_fusion",
        "init_from",
        "import_command",
        "rotary",
        "rotary_percent",
        "rotary_theta",
    ),
    "data": tuple(DataSection.model_fields),
    "train": (
        "eval_interval",
        "eval_iters",
        "save_interval",
        "save_interval_epochs",
        "samples",
        "rampup_batch_size",
        "max_tokens",
        "lr_warmup_tokens",
        "lr_decay_tokens",
        "exit_duration_mins",
        "exit_interval",
    ),
    "activation_checkpointing": (
        "method",
        "num_layers",
        "implementation",
        "partition_activations",
        "contiguous_memory",
        "cpu_checkpointing",
    ),
    "extra": ("megatron_args",),
    "speed": tuple(SpeedSection.model_fields),
    "logging": ("tensorboard_queue_size", "log_batch_size", "log_optimizer_states", "timing_log_level"),
    "moe": tuple(MoeSection.model_fields),
    "curriculum": tuple(CurriculumSection.model_fields),
    "distillation": tuple(DistillationSection.model_fields),
}
"""The keys a fine-tuning does not read (the loop is not Megatron): a value other than the
default is refused rather than silently ignored (train.iters and train.tokens: the length check)."""

READ_AS_FINETUNING_DOES: dict[str, dict[str, Any]] = {
    "activation_checkpointing": {"method": "uniform", "num_layers": 1},
}
"""Values of NOT_READ_BY_FINETUNING's keys that say what fine-tuning does anyway: transformers'
gradient checkpointing keeps each layer's input (uniform, one layer a chunk), as the block
activation_checkpointing/full says, so `activation_checkpointing=full` is taken as it is."""


@finetuning_check
def _finetune_reads_not(recipe: Recipe) -> Problem | None:
    unread = [
        f"{section}.{name}"
        for section, names in NOT_READ_BY_FINETUNING.items()
        for name in names
        if _set_beyond(recipe, section, name, READ_AS_FINETUNING_DOES)
    ]
    if recipe.activation_checkpointing.granularity == "selective":
        unread.append("activation_checkpointing.granularity")
    if not unread:
        return None
    return Problem(
        tuple(unread),
        "a fine-tuning recipe does not read these keys: it trains a Hugging Face model data parallel on "
        "the task's split files (finetune.data), without Megatron (activation_checkpointing: full only, "
        "as transformers' gradient checkpointing)",
        "remove them, or remove the finetune section to pretrain",
    )


def _options_while_off(
    recipe: Recipe, section: str, options: Iterable[str], *, on: bool, switch: str, what: str, fix: str
) -> Problem | None:
    """A section's options given while the section is off (`on` false): refused, naming them and the
    key that turns it on (`switch`), since nothing would read them."""
    given = [name for name in options if _differs_from_default(getattr(recipe, section), name)]
    if on or not given:
        return None
    return Problem(
        (switch, *(f"{section}.{name}" for name in given)),
        f"{', '.join(given)}: {what}: nothing would change",
        fix,
    )


def _set_beyond(recipe: Recipe, section: str, name: str, done_anyway: dict[str, dict[str, Any]]) -> bool:
    """Whether `section`.`name` is set to a value other than its default and other than the one
    `done_anyway` says the program does anyway (a loop that reads not the key: fine-tuning's, FSDP2's)."""
    values = getattr(recipe, section)
    return _differs_from_default(values, name) and getattr(values, name) != done_anyway.get(section, {}).get(
        name, ...
    )


def _differs_from_default(section: Any, name: str) -> bool:
    info = type(section).model_fields[name]
    return getattr(section, name) != info.get_default(call_default_factory=True)


@only_for(Fsdp2Training)
@check
def _fsdp2_carries_not(recipe: Recipe) -> Problem | None:
    refused: dict[str, list[str]] = {}  # why -> keys
    for section, (names, why) in NOT_CARRIED_BY_FSDP2.items():
        for name in names or type(getattr(recipe, section)).model_fields:
            if _set_beyond(recipe, section, name, AS_FSDP2_DOES):
                refused.setdefault(why, []).append(f"{section}.{name}")
    if recipe.activation_checkpointing.granularity == "selective":
        refused.setdefault("Megatron's selective recomputation of its core attention", []).append(
            "activation_checkpointing.granularity"
        )
    if recipe.model.attention not in ("megatron", "sdpa"):
        refused.setdefault("Megatron's FlashAttention paths: use model.attention=sdpa", []).append(
            "model.attention"
        )
    if recipe.precision.fp16:
        refused.setdefault("fp16's loss scaling is not carried by the FSDP2 loop: use bf16", []).append(
            "precision.fp16"
        )
    if recipe.hardware.launcher != "torchrun":
        refused.setdefault("the FSDP2 loop starts under torchrun", []).append("hardware.launcher")
    if not refused:
        return None
    keys = tuple(key for group in refused.values() for key in group)
    reasons = "; ".join(f"{', '.join(group)}: {why}" for why, group in refused.items())
    return Problem(
        keys,
        f"engine fsdp2 cannot carry {len(keys)} key(s) of this recipe: {reasons}",
        "remove them (their defaults), or train with engine=megatron-deepspeed, which carries each",
    )


@only_for(FineTuning)
@check
def _finetuning_runs_on_deepspeed(recipe: Recipe) -> Problem | None:
    if recipe.engine == "megatron-deepspeed":
        return None
    return Problem(
        ("engine",),
        "a fine-tuning recipe runs zerolab's fine-tuning loop on DeepSpeed; engine fsdp2 is for pretraining",
        "remove engine (or the finetune section, to pretrain on FSDP2)",
    )
