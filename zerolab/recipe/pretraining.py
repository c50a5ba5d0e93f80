"""Pretraining, the job kind of a recipe without a `finetune` section: Megatron's pretrain_gpt.py,
started in every rank by zerolab's entry (its patches), on the recipe's prepared dataset. Its
arguments come from the schema's declarations (zerolab.recipe.destinations) and what is derived
from several keys; its checkpoints, TensorBoard events and W&B run go into the run directory."""

from __future__ import annotations

from typing import Any

from zerolab import rundir
from zerolab.contracts import (
    ATTENTION_ENV,
    DS_CONFIG_FILE,
    FLASH_V2,
    MEGATRON_ENTRY_MODULE,
    SDPA,
    SPEED_ENV,
    TENSORBOARD_DIR,
    UNIVERSAL_CHECKPOINT_MODULE,
    WANDB_DIR,
)
from zerolab.engine.paths import engine_dir
from zerolab.imported import layout_tag
from zerolab.recipe.destinations import Megatron, destinations, one_to_one
from zerolab.recipe.inputs import (
    BUNDLED_TOKENIZER_FILES,
    DATASET_KEYS,
    blend,
    dataset_paths,
    pretraining_inputs_problems,
    tokenizer_files,
)
from zerolab.recipe.length import pretraining_iters, pretraining_split_tokens, save_interval
from zerolab.recipe.provenance import Sources
from zerolab.recipe.resumption import Resume
from zerolab.recipe.schema import Recipe

ENTRY_MODULE = MEGATRON_ENTRY_MODULE


class Pretraining:
    """A pretraining recipe's job: what differs from a fine-tuning (zerolab.recipe.job.Job)."""

    entry_module = ENTRY_MODULE
    reads_ds_config = True
    engine_judges_extras = True
    """Megatron's parser and DeepSpeed's config classes judge extra.megatron_args and extra.ds_config
    before launch (zerolab.recipe.extras)."""
    loads_model_whole = False
    refuses_what_does_not_fit = False

    def __init__(self, recipe: Recipe) -> None:
        self.recipe = recipe

    def program_args(
        self, run_dir: str, *, engine: str | None, resume: Resume | None, load_own_checkpoints: bool
    ) -> list[str]:
        """pretrain_gpt.py of the engine checkout at `engine` (default: this machine's) and its
        arguments: the recipe's, the run directory's, then the checkpoint it continues or the
        imported weights it starts from, then extra.megatron_args."""
        recipe = self.recipe
        init = recipe.model.init_from is not None
        return [
            f"{engine or engine_dir()}/pretrain_gpt.py",
            *megatron_args(recipe, f"{run_dir}/{DS_CONFIG_FILE}"),
            *run_dir_args(recipe, run_dir, load_own_checkpoints=load_own_checkpoints and not init),
            *(resume_args(recipe, resume) if resume else init_args(recipe)),
            *recipe.extra.megatron_args,
        ]

    def request(self, *, engine: str | None, resume: Resume | None) -> None:
        """None: pretraining reads its settings from its arguments."""
        return None

    def steps_before(self, *, engine: str | None, resume: Resume | None) -> tuple[tuple[str, ...], ...]:
        """A resume under another setup first converts its checkpoint to the universal format, beside
        it (reused when converted before), with the engine's Python."""
        if resume is None or not resume.universal:
            return ()
        checkpoints = resume.run_dir / rundir.CHECKPOINTS_DIR
        return (
            (
                "python", "-m", UNIVERSAL_CHECKPOINT_MODULE,
                engine or str(engine_dir()), str(checkpoints), str(resume.iteration),
            ),
        )  # fmt: skip

    def env(self) -> dict[str, str]:
        """The attention patch's and the speed switches' variables."""
        return attention_env(self.recipe) | speed_env(self.recipe)

    def ds_config(self) -> dict[str, Any]:
        """The curriculum's block where it is on (Megatron builds its own optimizer)."""
        return curriculum_config(self.recipe)

    def adopt_model(self, sources: Sources) -> None:
        """Nothing: the recipe's model section is the model's shape."""

    def input_problems(self) -> list[str]:
        """The missing or mismatched dataset, tokenizer and imported weights."""
        return pretraining_inputs_problems(self.recipe)

    def input_paths(self) -> list[str]:
        """The files read that may be given as absolute paths: the datasets and tokenizer files."""
        recipe = self.recipe
        return [*dataset_paths(recipe).values(), *tokenizer_files(recipe).values()]

    def run_exported_at_start(self) -> str | None:
        """None: a pretraining exports no model before it starts."""
        return None

    def train_iters(self) -> int:
        """Iterations as given, or from train.tokens or train.epochs (zerolab.recipe.length)."""
        return pretraining_iters(self.recipe)

    def epoch_tokens(self) -> int:
        """Tokens in the training split (UserError without the dataset's index)."""
        return pretraining_split_tokens(self.recipe)

    def what(self) -> str:
        """What the render's summary line says is trained: the model."""
        return self.recipe.model.name

    def attention_label(self) -> str:
        """model.attention as the engine names it."""
        return self.recipe.model.attention

    def full_recompute_label(self) -> str:
        """Full recomputation: `full uniform x1`, `full block x2 (deepspeed)`."""
        ckpt = self.recipe.activation_checkpointing
        implementation = " (deepspeed)" if ckpt.implementation == "deepspeed" else ""
        return f"full {ckpt.method or 'uniform'} x{ckpt.num_layers or 1}{implementation}"

    def run_facts(self) -> dict[str, Any]:
        """run.json's facts of this kind only: the engine."""
        return {"engine": "megatron-deepspeed"}


def megatron_args(recipe: Recipe, ds_config_path: str) -> list[str]:
    """The pretrain_gpt.py arguments: each section's one-to-one fields as the schema declares them
    (zerolab.recipe.destinations), in field order, and what is derived from several fields."""
    hw = recipe.hardware
    files = tokenizer_files(recipe)  # GPT-2's, where the tokenizer reads them (the model: one-to-one)
    tokenizer_flags = {
        key: [_declared_flag(recipe, "data", key), files[key]] if key in files else []
        for key in BUNDLED_TOKENIZER_FILES
    }
    args = [
        *section_args(recipe, "model"),
        *section_args(recipe, "parallel", at={"sequence": sequence_args(recipe)}),
        *section_args(recipe, "train", at={"iters": iters_args(recipe)}),
        *section_args(recipe, "data", at=tokenizer_flags | split_args(recipe) | dataset_args(recipe)),
        "--distributed-backend", "gloo" if hw.device == "cpu" else "nccl",
    ]  # fmt: skip
    args += fusion_args(recipe)
    args += attention_args(recipe)
    args += activation_checkpointing_args(recipe)
    args += section_args(recipe, "precision")
    args += section_args(recipe, "logging")  # the TensorBoard options; the rest: run_dir_args
    args += moe_args(recipe)
    args += section_args(recipe, "distillation")
    args += ["--deepspeed", "--deepspeed_config", ds_config_path, *section_args(recipe, "zero")]
    if recipe.parallel.pipeline == 1:
        args.append("--no-pipeline-parallel")
    if recipe.zero.offload_optimizer:
        args.append("--cpu-optimizer")
    if recipe.zero.offload_param:
        args += ["--remote-device", "cpu"]
        if recipe.zero.pin_memory:
            args.append("--use-pin-memory")
    return args


def section_args(recipe: Recipe, section: str, at: dict[str, list[str]] | None = None) -> list[str]:
    """The Megatron arguments of one section's one-to-one fields, in field order, with `at[name]`
    placed where field `name` stands (a value derived from it)."""
    values = getattr(recipe, section)
    args: list[str] = []
    for name, info in type(values).model_fields.items():
        for destination in one_to_one(info, Megatron):
            args += _flag(destination.flag, getattr(values, name))
        args += (at or {}).get(name, [])
    return args


def curriculum_config(recipe: Recipe) -> dict[str, Any]:
    """ds_config curriculum_learning: the seqlen curriculum of the curriculum section, where enabled."""
    cl = recipe.curriculum
    if not cl.enabled:
        return {}
    schedule: dict[str, Any] = {"total_curriculum_step": cl.steps, "difficulty_step": cl.difficulty_step}
    if cl.schedule == "fixed_root":
        schedule["root_degree"] = cl.root_degree
    return {
        "curriculum_learning": {
            "enabled": True,
            "curriculum_type": "seqlen",
            "min_difficulty": cl.min_seq_length,
            "max_difficulty": cl.max_seq_length or recipe.model.seq_length,
            "schedule_type": cl.schedule,
            "schedule_config": schedule,
        }
    }


def moe_args(recipe: Recipe) -> list[str]:
    """The mixture-of-experts flags: the moe section's one-to-one keys (null: Megatron's default,
    nothing rendered) and --disable-moe-token-dropping where moe.token_dropping is false."""
    dropping = [] if recipe.moe.token_dropping else [_declared_flag(recipe, "moe", "token_dropping")]
    return [*section_args(recipe, "moe"), *dropping]


def sequence_args(recipe: Recipe) -> list[str]:
    """--ds-sequence-parallel-size where parallel.sequence splits sequences (none at 1, the
    engine's default)."""
    size = recipe.parallel.sequence
    return [_declared_flag(recipe, "parallel", "sequence"), str(size)] if size > 1 else []


def iters_args(recipe: Recipe) -> list[str]:
    """--train-iters: the length in iterations, as given or from tokens or epochs; none for a
    sample-based length (train.samples renders --train-samples, Megatron refusing both)."""
    if recipe.train.samples is not None:
        return []
    return ["--train-iters", str(pretraining_iters(recipe))]


def dataset_args(recipe: Recipe) -> dict[str, list[str]]:
    """The dataset keys' flags: a prefix as one argument, a blend (`W1 PREFIX1 W2 PREFIX2`) as one
    argument each word, as Megatron's nargs flags read a list (one argument with spaces would be
    read as one path)."""
    return {
        key: [_declared_flag(recipe, "data", key), *(value.split() if blend(value) else [value])]
        for key in DATASET_KEYS
        if (value := getattr(recipe.data, key)) is not None
    }


def split_args(recipe: Recipe) -> dict[str, list[str]]:
    """Megatron's --split deals the documents of data.path; split datasets need none."""
    if recipe.data.path is None:
        return {}
    return {"split": [_declared_flag(recipe, "data", "split"), recipe.data.split]}


def _declared_flag(recipe: Recipe, section: str, name: str) -> str:
    """The Megatron flag declared on a section's field."""
    (megatron,) = [
        item
        for item in destinations(type(getattr(recipe, section)).model_fields[name])
        if isinstance(item, Megatron)
    ]
    return megatron.flag


def _flag(flag: str, value: Any) -> list[str]:
    """A flag and its value as argv tokens: a true bool is a bare switch, None and False nothing."""
    if value is None or value is False:
        return []
    if value is True:
        return [flag]
    if isinstance(value, tuple | list):
        return [flag, *(str(item) for item in value)]
    return [flag, _num(value) if isinstance(value, float) else str(value)]


def fusion_args(recipe: Recipe) -> list[str]:
    """The engine's compiled fusions switched off where nothing needs them, so that no launch builds
    anything: gradient-accumulation fusion always (apex's fused_weight_gradient_mlp_cuda is only
    imported: its kernel call is commented out at the pinned commit), the masked-softmax kernels on
    CPU and wherever attention is not the engine's own (sdpa and flash never call them), and where
    model.masked_softmax_fusion asks for PyTorch's softmax."""
    args = ["--no-gradient-accumulation-fusion"]
    model = recipe.model
    if recipe.hardware.device == "cpu" or model.attention != "megatron" or not model.masked_softmax_fusion:
        args.append("--no-masked-softmax-fusion")
    return args


def attention_args(recipe: Recipe) -> list[str]:
    """model.attention flash: the engine's FlashAttention-2 path. megatron and sdpa add nothing
    (sdpa is zerolab's patch of the engine's CoreAttention, asked for by attention_env)."""
    flags = {"flash": FLASH_V2, "flash-v1": "--use-flash-attn-v1", "flash-triton": "--use-flash-attn-triton"}
    flag = flags.get(recipe.model.attention)
    return [flag] if flag else []


def attention_env(recipe: Recipe) -> dict[str, str]:
    """model.attention sdpa: ZEROLAB_ATTENTION=sdpa, which applies zerolab's sdpa_attention patch."""
    return {ATTENTION_ENV: SDPA} if recipe.model.attention == "sdpa" else {}


def speed_env(recipe: Recipe) -> dict[str, str]:
    """ZEROLAB_SPEED: the speed switches the recipe turns on, in the schema's order (none: unset)."""
    on = [name for name, value in recipe.speed.model_dump().items() if value]
    return {SPEED_ENV: ",".join(on)} if on else {}


def activation_checkpointing_args(recipe: Recipe) -> list[str]:
    """The recompute flags: Megatron's own (--recompute-*) or DeepSpeed's (--checkpoint-activations
    --deepspeed-activation-checkpointing), from the activation_checkpointing section."""
    ckpt = recipe.activation_checkpointing
    if ckpt.granularity == "none":
        return []
    if ckpt.granularity == "selective":
        return ["--recompute-granularity", "selective"]
    layers = str(ckpt.num_layers or 1)
    if ckpt.implementation == "megatron":
        method = ckpt.method or "uniform"
        return [
            "--recompute-granularity",
            "full",
            "--recompute-method",
            method,
            "--recompute-num-layers",
            layers,
        ]
    args = [
        "--checkpoint-activations",
        "--deepspeed-activation-checkpointing",
        "--checkpoint-num-layers",
        layers,
    ]
    if ckpt.partition_activations:
        args.append("--partition-activations")
    if ckpt.contiguous_memory:
        args.append("--contigious-checkpointing")
    if ckpt.cpu_checkpointing:
        args.append("--checkpoint-in-cpu")
    return args


def run_dir_args(recipe: Recipe, run_dir: str, *, load_own_checkpoints: bool = False) -> list[str]:
    """What the engine writes into the run directory: checkpoints (train.save_interval, or
    save_interval_epochs in iterations; with `load_own_checkpoints` also loaded from there),
    TensorBoard events and the W&B run (logging)."""
    args: list[str] = []
    interval = save_interval(recipe)
    if interval is not None:
        checkpoints = f"{run_dir}/{rundir.CHECKPOINTS_DIR}"
        args += ["--save", checkpoints, "--save-interval", str(interval)]
        if load_own_checkpoints:
            args += ["--load", checkpoints]
    logging = recipe.logging
    if logging.tensorboard:
        args += [
            "--tensorboard-dir", f"{run_dir}/{TENSORBOARD_DIR}",
            "--tensorboard-log-interval", str(recipe.train.log_interval),
            "--log-timers-to-tensorboard",
            "--log-validation-ppl-to-tensorboard",
        ]  # fmt: skip
    if logging.wandb_project is not None:
        args += [
            "--wandb-project", logging.wandb_project,
            "--wandb-exp-name", logging.wandb_name or recipe.name,
            "--wandb-save-dir", f"{run_dir}/{WANDB_DIR}",
        ]  # fmt: skip
    return args


def resume_args(recipe: Recipe, resume: Resume) -> list[str]:
    """`--load` of the earlier run's checkpoints (`--universal-checkpoint`: converted, under another
    setup), and `--override-opt_param-scheduler` when the
    learning-rate schedule differs from the one saved (more iterations, another rate): Megatron
    checks the schedule against the checkpoint's when it resumes."""
    args = ["--load", str(resume.run_dir / rundir.CHECKPOINTS_DIR)]
    if resume.universal:
        args.append("--universal-checkpoint")
    if schedule(resume.recipe) != schedule(recipe):
        args.append("--override-opt_param-scheduler")
    return args


def init_args(recipe: Recipe) -> list[str]:
    """model.init_from as the engine's fine-tuning load: the layout's checkpoint (a tag of the
    imported folder), weights only."""
    if recipe.model.init_from is None:
        return []
    tag = layout_tag(recipe.parallel.tensor, recipe.parallel.pipeline)
    return ["--load", recipe.model.init_from, "--load-tag", tag, "--finetune"]


def schedule(recipe: Recipe) -> tuple[Any, ...]:
    """What Megatron's scheduler checks against a checkpoint: iterations, rates, warm-up, decay."""
    train = recipe.train
    return (
        pretraining_iters(recipe),
        train.lr,
        train.min_lr,
        train.lr_warmup_iters,
        train.lr_warmup_tokens,
        train.lr_decay_tokens,
        train.lr_decay_style,
        train.weight_decay,
    )


def _num(value: float) -> str:
    """A float as Megatron's argparse reads it, shortest exact form (0.0001 -> 0.0001, 6e-05)."""
    return repr(float(value))
