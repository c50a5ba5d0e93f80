"""Fine-tuning, the job kind of a recipe with a `finetune` section: zerolab's loop
(zerolab.rank.finetune_loop) trains a Hugging Face GPT-2 with a classification head on a GLUE task, on
DeepSpeed's engine, from the request.json rendered here. It reads the model, given as a Hugging
Face folder, a hub name or a run directory of `zerolab launch`, and the task's split files. The
model's shape comes from its config.json (a hub model's when this machine's cache holds it, a run's
from its recipe), so that run.json, summaries and estimates describe the model fine-tuned. Its
length is whole epochs of the task's training file, each examples // global batch steps (the loop
deals whole batches only); every example is padded to model.seq_length tokens."""

from __future__ import annotations

import functools
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from zerolab import rundir
from zerolab.contracts import (
    FINETUNE_LOOP_MODULE,
    REQUEST_FILE,
    TRAIN_SPLIT,
    FinetuneRequest,
    GlueTask,
    split_file,
    task_splits,
)
from zerolab.errors import UserError
from zerolab.finetune.glue import glue_task
from zerolab.hf_folder import cached_hub_folder, looks_like_path, missing_files, read_config, shape
from zerolab.locations import CONFIGS_DIR, display_path
from zerolab.recipe.provenance import Sources, source_of
from zerolab.recipe.resumption import Resume
from zerolab.recipe.schema import MODEL_SHAPE_KEYS, FinetuneSection, Recipe
from zerolab.recipe.yaml_io import read_yaml_mapping

CLASSIFIER = "GPT2ForSequenceClassification"
FINETUNE_MODULE = FINETUNE_LOOP_MODULE


@dataclass(frozen=True)
class ModelSource:
    """finetune.model, told apart: a model folder, a run directory, or a hub name."""

    spec: str
    kind: Literal["folder", "run", "hub"]

    @property
    def name(self) -> str:
        """How run.json and the summaries name the model: the hub name, the run's name (its run.json),
        or the folder's own name."""
        if self.kind == "hub":
            return self.spec
        facts, _ = rundir.read_facts(Path(self.spec)) if self.kind == "run" else (None, [])
        return facts.name if facts and facts.name else Path(self.spec).resolve().name

    def folder(self) -> Path | None:
        """The folder whose config.json says what the model is: the folder itself, or a hub model's
        in this machine's cache (None when not cached; a run directory has none)."""
        if self.kind == "folder":
            return Path(self.spec)
        return cached_hub_folder(self.spec) if self.kind == "hub" else None


def model_source(spec: str, command: str | None = None) -> ModelSource:
    """What `spec` names: a run directory, a folder, or a hub name. A folder is any path that
    hf_folder.looks_like_path takes for one (`./m`, `/m`, `~/m`, `a/b/c`, `exports/tiny-demo`), and
    the folder `command` (finetune.model_command) writes; only an `owner/name` (or `name`) that is
    none of these is a hub name."""
    path = Path(spec)
    if path.is_dir() and rundir.is_run_dir(path):
        return ModelSource(spec, "run")
    return ModelSource(spec, "folder" if looks_like_path(spec) or writes(command, spec) else "hub")


def model_shape(source: ModelSource) -> dict[str, Any] | None:
    """The model's shape keys as far as they can be known before launch, else None."""
    if source.kind == "run":
        try:
            model = read_yaml_mapping(rundir.whole_recipe(Path(source.spec))).get("model", {})
        except UserError:
            return None
        return {key: model[key] for key in MODEL_SHAPE_KEYS if key in model} or None
    folder = source.folder()
    if folder is None:
        return None
    try:
        return shape(read_config(folder))
    except UserError:
        return None  # reported by model_problems


def adopt_model(recipe: Recipe, finetune: FinetuneSection, sources: Sources) -> None:
    """Give a fine-tuning recipe the shape and name of its model. A shape key set by a building
    block (configs/model/: the shape before the model is at hand) yields to the model's; one the
    recipe or an override set must agree. UserError naming the key otherwise."""
    source = model_source(finetune.model, finetune.model_command)
    known = model_shape(source) or {}
    blocks = f"{display_path(CONFIGS_DIR)}/"
    disagree = []
    for key, value in known.items():
        given = getattr(recipe.model, key)
        where = source_of(sources, ("model", key))
        if given != value and where != "schema default" and not where.startswith(blocks):
            disagree.append(
                f"{where}: model.{key}={given}, but the model of finetune.model ({source.spec}) has "
                f"{key} {value}: fine-tuning takes the model's own shape; remove model.{key}"
            )
        else:
            setattr(recipe.model, key, value)
    if disagree:
        raise UserError("\n".join(disagree))
    recipe.model.name = source.name


def model_problems(finetune: FinetuneSection, task: GlueTask) -> list[str]:
    """What keeps the model of `finetune` from fine-tuning on `task`: a folder missing, not a GPT-2,
    without weights or tokenizer, or with a classification head of another label count; a run
    directory without a checkpoint."""
    source = model_source(finetune.model, finetune.model_command)
    if source.kind == "run":
        if not rundir.saved_iterations(Path(source.spec)):
            return [
                f"finetune.model: the run directory {source.spec} holds no checkpoint to export; train it "
                "with train.save_interval set, or give another run"
            ]
        return []
    folder = source.folder()
    if folder is None:
        return []  # a hub model not cached here: transformers downloads it when the run starts
    if not folder.is_dir():
        make = (
            f"make it with `{finetune.model_command}`"
            if writes(finetune.model_command, finetune.model)
            else f"export a run of zerolab into it with `zerolab export RUN_DIR --out {finetune.model}` (the "
            f"CPU demo's: `make demo && zerolab export logs/sweeps/demo/zero-z0 --out {finetune.model}`), "
            "save a Hugging Face GPT-2 there (save_pretrained), or give a hub name (gpt2-xl) or a run "
            "directory of zerolab launch"
        )
        return [f"finetune.model: {folder} not found; {make}"]
    try:
        config = read_config(folder)
    except UserError as error:
        return [f"finetune.model: {error}"]
    missing = missing_files(folder)
    if missing:
        return [f"finetune.model: {missing}"]
    labels = config.get("id2label")
    if (
        CLASSIFIER in config.get("architectures", [])
        and isinstance(labels, dict)
        and len(labels) != task.num_labels
    ):
        return [
            f"finetune.model: {folder} holds a classification head of {len(labels)} labels, and {task.name} "
            f"has {task.num_labels}; start from the model without that head (the pretrained GPT-2), or "
            f"choose a task of {len(labels)} labels"
        ]
    return []


def writes(command: str | None, path: str) -> bool:
    """Whether `command` writes `path` (its `--out`): a recipe's hint stays true after an override
    points the key elsewhere only when it does."""
    words = shlex.split(command or "")
    return "--out" in words[:-1] and Path(words[words.index("--out") + 1]) == Path(path)


def prepare_command(finetune: FinetuneSection) -> str:
    """The command that writes the task's split files: finetune.prepare_command when it writes
    finetune.data, else `zerolab prep glue TASK --out DATA`."""
    if finetune.prepare_command is not None and writes(finetune.prepare_command, finetune.data):
        return finetune.prepare_command
    return f"zerolab prep glue {finetune.task} --out {finetune.data}"


def data_problems(finetune: FinetuneSection, task: GlueTask) -> list[str]:
    """One message per split file of `task` missing from finetune.data, with the command that writes it."""
    missing = [
        path for split in task_splits(task) if not (path := split_file(finetune.data, task, split)).is_file()
    ]
    if not missing:
        return []
    files = ", ".join(str(path) for path in missing)
    return [f"finetune.data: {files} not found; prepare it with `{prepare_command(finetune)}`"]


def steps_per_epoch(recipe: Recipe, finetune: FinetuneSection) -> int:
    """Optimizer steps in one pass over the task's training file: its examples // the global batch
    (the rest of an epoch is left out, as the loop deals whole batches). UserError when the file is
    missing or holds less than one batch."""
    path = split_file(finetune.data, glue_task(finetune.task), TRAIN_SPLIT)
    try:
        stat = path.stat()
    except OSError:
        raise UserError(
            f"train.epochs: counting the examples needs {path}, not found; prepare it with "
            f"`{prepare_command(finetune)}`"
        ) from None
    examples = _lines(path.resolve(), stat.st_mtime_ns, stat.st_size)
    steps = examples // recipe.train.global_batch_size
    if steps < 1:
        raise UserError(
            f"train.global_batch_size={recipe.train.global_batch_size}: {path} holds {examples} examples, "
            "not one global batch; lower the batch size"
        )
    return steps


@functools.lru_cache(maxsize=8)
def _lines(path: Path, mtime_ns: int, size: int) -> int:
    """Non-empty lines of a split file (cached while the file is unchanged)."""
    with open(path, "rb") as lines:
        return sum(1 for line in lines if line.strip())


HF_ATTENTION = {"megatron": "eager", "sdpa": "sdpa", "flash": "flash_attention_2"}
"""model.attention as transformers' attn_implementation, for fine-tuning: eager computes the same
seq x seq scores as the engine's own attention (flash-v1 and flash-triton: refused by the checks)."""


def finetune_optimizer(recipe: Recipe) -> dict[str, Any]:
    """A fine-tuning's optimizer, in its ds_config: AdamW with the train section's rate, betas and
    weight decay (which the loop leaves off biases and layer norms, as the Trainer does): torch's
    (Hugging Face's Trainer's adamw_torch), or DeepSpeed's CPU Adam when the optimizer is offloaded."""
    train = recipe.train
    return {
        "type": "AdamW",
        "params": {
            "lr": train.lr,
            "betas": [train.adam_beta1, train.adam_beta2],
            "eps": 1e-8,
            "weight_decay": train.weight_decay,
            "torch_adam": not recipe.zero.offload_optimizer,
        },
    }


def finetune_request(recipe: Recipe, finetune: FinetuneSection) -> FinetuneRequest:
    """The request.json of a fine-tuning recipe: the model, the task's split files, the length and
    schedule, and the model settings the recipe's model section gives (attention, dropouts,
    initialisation of the new head, gradient checkpointing)."""
    model, train, logging = recipe.model, recipe.train, recipe.logging
    assert train.epochs is not None, "checks guarantee it"
    task = glue_task(finetune.task)
    wandb = None
    if logging.wandb_project is not None:
        wandb = {"project": logging.wandb_project, "name": logging.wandb_name or recipe.name}
    return FinetuneRequest(
        model=finetune.model,
        exported=model_source(finetune.model).kind == "run",
        task=task.name,
        train_file=str(split_file(finetune.data, task, TRAIN_SPLIT)),
        eval_files={split: str(split_file(finetune.data, task, split)) for split in task.eval_splits},
        max_seq_length=model.seq_length,
        epochs=int(train.epochs),
        lr_schedule=train.lr_decay_style,
        warmup_steps=train.lr_warmup_iters,
        weight_decay=train.weight_decay,
        seed=train.seed,
        shuffle=finetune.shuffle,
        log_interval=train.log_interval,
        attention=HF_ATTENTION.get(model.attention, "eager"),
        gradient_checkpointing=recipe.activation_checkpointing.granularity == "full",
        config={
            "resid_pdrop": model.hidden_dropout,
            "embd_pdrop": model.hidden_dropout,
            "attn_pdrop": model.attention_dropout,
            "initializer_range": model.init_method_std,
        },
        tensorboard=logging.tensorboard,
        wandb=wandb,
    )


class FineTuning:
    """A fine-tuning recipe's job: what differs from a pretraining (zerolab.recipe.job.Job)."""

    entry_module = FINETUNE_MODULE
    reads_ds_config = True
    engine_judges_extras = False
    """No Megatron arguments to judge (the checks refuse extra.megatron_args): DeepSpeed judges
    extra.ds_config when the ranks start."""
    loads_model_whole = True
    """zerolab.rank.finetune_loop loads the whole model on every rank, in fp32, before DeepSpeed
    partitions it: the memory estimate counts it."""
    refuses_what_does_not_fit = True
    """A fine-tuning the memory estimate says does not fit its GPUs is refused (pretraining: a warning)."""

    def __init__(self, recipe: Recipe, finetune: FinetuneSection) -> None:
        self.recipe = recipe
        self.finetune = finetune

    def program_args(
        self, run_dir: str, *, engine: str | None, resume: Resume | None, load_own_checkpoints: bool
    ) -> list[str]:
        """The loop's one argument, its request.json in the run directory (the engine checkout is
        not read; nothing is loaded from a checkpoint)."""
        assert resume is None, "a fine-tuning run is not resumed (zerolab.recipe.selection refuses it)"
        return [f"{run_dir}/{REQUEST_FILE}"]

    def request(self, *, engine: str | None, resume: Resume | None) -> FinetuneRequest:
        """The request.json the loop reads."""
        return finetune_request(self.recipe, self.finetune)

    def steps_before(self, *, engine: str | None, resume: Resume | None) -> tuple[tuple[str, ...], ...]:
        """None: a fine-tuning is not resumed, and a run given as its model is exported by the launch."""
        return ()

    def env(self) -> dict[str, str]:
        """Nothing beyond the common environment: the engine's patches and switches are not applied."""
        return {}

    def ds_config(self) -> dict[str, Any]:
        """The optimizer, which the loop leaves to DeepSpeed."""
        return {"optimizer": finetune_optimizer(self.recipe)}

    def adopt_model(self, sources: Sources) -> None:
        """Give the recipe the shape and name of its model (adopt_model)."""
        adopt_model(self.recipe, self.finetune, sources)

    def input_problems(self) -> list[str]:
        """Every problem with the model and the task's split files."""
        task = glue_task(self.finetune.task)
        return model_problems(self.finetune, task) + data_problems(self.finetune, task)

    def input_paths(self) -> list[str]:
        """The files read that may be given as absolute paths: the model and the data folder."""
        return [self.finetune.model, f"{self.finetune.data}/"]

    def run_exported_at_start(self) -> str | None:
        """finetune.model when it is a run directory (the launch exports its model first), else None."""
        return self.finetune.model if model_source(self.finetune.model).kind == "run" else None

    def train_iters(self) -> int:
        """train.epochs whole epochs of steps_per_epoch steps."""
        epochs = self.recipe.train.epochs
        if epochs is None or not epochs.is_integer():
            raise UserError("train.epochs: a fine-tuning trains a whole number of epochs; set it (e.g. 3)")
        return int(epochs) * steps_per_epoch(self.recipe, self.finetune)

    def epoch_tokens(self) -> int:
        """The padded tokens of one epoch's batches (UserError without the training file)."""
        recipe = self.recipe
        return (
            steps_per_epoch(recipe, self.finetune) * recipe.train.global_batch_size * recipe.model.seq_length
        )

    def what(self) -> str:
        """What the render's summary line says is trained: the model, the task, the example length."""
        recipe = self.recipe
        return (
            f"{recipe.model.name} fine-tuned on GLUE {self.finetune.task}, "
            f"{recipe.model.seq_length} tokens per example"
        )

    def attention_label(self) -> str:
        """model.attention as transformers names it (eager, sdpa, flash_attention_2)."""
        return HF_ATTENTION.get(self.recipe.model.attention, self.recipe.model.attention)

    def full_recompute_label(self) -> str:
        """Full recomputation, as transformers does it."""
        return "full (transformers' gradient checkpointing)"

    def run_facts(self) -> dict[str, Any]:
        """run.json's facts of this kind only: the engine, the task and the model as given."""
        return {"engine": "deepspeed", "task": self.finetune.task, "model_source": self.finetune.model}
