"""What zerolab's host code and the code running in the engine's Python (zerolab.rank) exchange:
the run directory's files the ranks read or write, the environment variables and flags the render
sets for them, the request files of the fine-tuning loop and of the engine scripts, the GLUE tasks
a request names, the speed switches and the ladder's plan, the `zerolab NAME:` line a script
says why it failed with, and the lock that keeps two writers out of one folder (a sweep's, the GPU
check's, a checkpoint's conversion). The one module both sides import: standard library only."""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import os
import re
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

# --- where the rank code is --------------------------------------------------------------------

RANK_DIR = Path(__file__).resolve().with_name("rank")
"""zerolab.rank's folder: its scripts run by path, in the engine's Python."""
MEGATRON_ENTRY_MODULE = "zerolab.rank.megatron_entry"
"""What every pretraining rank runs (`python -m MODULE PRETRAIN_SCRIPT ARGS...`)."""
FINETUNE_LOOP_MODULE = "zerolab.rank.finetune_loop"
"""What every fine-tuning rank runs (`python -m MODULE RUN_DIR/request.json`)."""
FSDP2_TRAIN_MODULE = "zerolab.rank.fsdp2_train"
"""What every rank of a recipe with `engine: fsdp2` runs (`python -m MODULE RUN_DIR/request.json`)."""
RANDOM_GPT2_MODULE = "zerolab.rank.random_gpt2"
"""Writes a GPT-2 of a given shape with random weights (`python -m MODULE --help`)."""
UNIVERSAL_CHECKPOINT_MODULE = "zerolab.rank.universal_checkpoint"
"""Converts a checkpoint to DeepSpeed's universal format (`python -m MODULE ENGINE CHECKPOINTS N`)."""
PREBUILD_KERNELS_MODULE = "zerolab.rank.prebuild_kernels"
"""Compiles Megatron's fused kernels under the workarounds (`python -m MODULE ENGINE_DIR`)."""


def rank_script(name: str) -> Path:
    """The script zerolab.rank.`name` (`score_hf`), run by path: `python PATH ARGS...`."""
    return RANK_DIR / f"{name}.py"


SAMPLE_INDEX_OK = "zerolab: build_sample_idx ok"
"""What the rank script sample_index_check prints when Megatron's dataset helpers answer correctly."""

# --- the engine scripts' request and error line ------------------------------------------------

REQUEST_FILE = "request.json"
"""The request an engine script or the fine-tuning loop reads (the run directory's, for the loop)."""


def error_prefix(name: str) -> str:
    """`zerolab NAME: `, the start of the stderr line an engine script for `zerolab NAME` says why it
    failed with (zerolab.engine.scripts makes it the UserError)."""
    return f"zerolab {name}: "


# --- a folder's lock: one writer at a time, the holder named ----------------------------------


class LockHeld(Exception):
    """Another process holds the lock; `holder` says which: `pid N: WHAT` (what it wrote in it)."""

    def __init__(self, holder: str) -> None:
        super().__init__(holder)
        self.holder = holder


@contextlib.contextmanager
def holding(lock: Path, what: str, *, waiting: Callable[[str], None] | None = None) -> Iterator[None]:
    """Hold the lock file `lock` (an flock, released when this process ends however it ends) while
    the block runs, its text `pid N: WHAT` naming the holder; the file is removed again when the
    block ends. When another process holds it: LockHeld, or with `waiting`, waiting(holder) once and
    then wait for it to be released."""
    told = False
    while True:
        handle = open(lock, "a+")  # noqa: SIM115 (held until the block ends)
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if waiting is None:
                handle.close()
                raise LockHeld(lock_holder(lock)) from None
            if not told:
                waiting(lock_holder(lock))
                told = True
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            if os.stat(lock).st_ino == os.fstat(handle.fileno()).st_ino:
                break
        except FileNotFoundError:
            pass
        handle.close()  # locked a file its holder had just removed: take the new one
    try:
        handle.truncate(0)
        handle.write(f"pid {os.getpid()}: {what}\n")
        handle.flush()
        yield
    finally:
        lock.unlink(missing_ok=True)  # while still held: whoever opened it before finds it gone, retries
        fcntl.flock(handle, fcntl.LOCK_UN)
        handle.close()


def lock_holder(lock: Path) -> str:
    """What the holder of `lock` wrote in it (`pid N: WHAT`), or that it has not yet."""
    try:
        text = lock.read_text(errors="replace").strip()
    except OSError:
        text = ""
    return text or "a process that has just taken it"


# --- the run directory's files the ranks read or write -----------------------------------------

DS_CONFIG_FILE = "ds_config.json"
DEEPSPEED_CONFIG_FLAGS = ("--deepspeed_config", "--deepspeed-config")
"""The two spellings of the flag that names the DeepSpeed config file (DeepSpeed's parser takes both)."""
TENSORBOARD_DIR = "tensorboard"
WANDB_DIR = "wandb"
FINETUNE_RECORDS_FILE = "finetune.jsonl"
"""One JSON object per line, written by rank 0 of the fine-tuning loop."""
EXPORTED_MODEL_DIR = "model"
"""Where in the run directory a launch exports the model of a run directory given as the model."""

CHECKPOINTS_DIR = "checkpoints"
"""The run directory's folder of checkpoints (Megatron's --save, the FSDP2 loop's)."""
LATEST_CHECKPOINT = "latest_checkpointed_iteration.txt"
"""Megatron's record, in the checkpoints directory, of the last complete save (the FSDP2 loop's too)."""
STEP_PREFIX = "global_step"
"""DeepSpeed's name for the folder of one iteration's checkpoint (`global_step50`)."""
LATEST_UNIVERSAL = "latest_universal"
"""DeepSpeed's record, in the checkpoints directory, of the universal checkpoint to load."""


def step_folder(iteration: int) -> str:
    """The folder of the checkpoint saved at `iteration`, in a run's checkpoints/."""
    return f"{STEP_PREFIX}{iteration}"


def universal_folder(iteration: int) -> str:
    """Where that checkpoint in DeepSpeed's universal format is written, beside it."""
    return f"{step_folder(iteration)}_universal"


# --- environment and flags the render sets for the ranks ---------------------------------------

FLASH_V2 = "--use-flash-attn-v2"
"""The engine's FlashAttention-2 switch (model.attention=flash); it imports flash_attn."""
ATTENTION_ENV = "ZEROLAB_ATTENTION"
SDPA = "sdpa"
"""ZEROLAB_ATTENTION's one value: the engine's attention by torch's scaled_dot_product_attention."""
SPEED_ENV = "ZEROLAB_SPEED"
"""The speed switches a launch turns on, comma-separated."""
LADDER_ENV = "ZEROLAB_LADDER"
"""The speed ladder's plan (JSON), when a launch runs one."""
HOST_HUGE_PAGES_ENV = "THP_MEM_ALLOC_ENABLE"
"""PyTorch's own switch ("1"): its host tensors of 2 MiB and more on transparent huge pages, one
page fault per 2 MiB instead of 512 (hardware.host_huge_pages; the CPU scripts of eval, generate,
export and import)."""

# --- the speed switches and the ladder's plan --------------------------------------------------

GC_INTERVAL = 100
"""Training steps between garbage collections under manual_gc."""


@dataclass(frozen=True)
class Switch:
    """One speed switch: its name (the recipe key speed.NAME), what it does (one line, printed at the
    top of train.log), and whether it is proven to compute what the engine computes (then it is on
    by default)."""

    name: str
    doc: str
    equal: bool

    @property
    def default(self) -> bool:
        """On by default when proven to train to the engine's own losses."""
        return self.equal


SWITCHES: tuple[Switch, ...] = (
    Switch(
        "unsynced_throughput_timer",
        "DeepSpeed's throughput timer not waiting for the GPU at each forward and step (its line: host time)",
        True,
    ),
    Switch(
        "sync_free_zeros",
        "the transformer layer's zeros filled on the device, not copied from the host (waits for the GPU)",
        True,
    ),
    Switch(
        "async_batch_copy",
        "at tensor parallel 1, each batch copied to the device from pinned memory, not broadcast to itself",
        True,
    ),
    Switch(
        "eager_elementwise",
        "bias-GeLU (GPT-2's tanh GeLU) and bias-dropout-add in eager torch, not the engine's TorchScript",
        True,
    ),
    Switch(
        "host_trims",
        "the layer norm's signature inspected once; no RNG-state fork around sdpa attention without dropout",
        True,
    ),
    Switch(
        "manual_gc",
        f"Python's garbage collector off in training steps, run between them every {GC_INTERVAL} steps",
        True,
    ),
    Switch(
        "compiled_elementwise",
        "bias-GeLU and bias-dropout-add by torch.compile: other rounding and dropout draws (off by default)",
        False,
    ),
    Switch(
        "compiled_layers",
        "each transformer layer by torch.compile, one graph for all (sdpa, TP 1, ZeRO 0-2; off by default)",
        False,
    ),
    Switch(
        "coalesced_grad_reduction",
        "ZeRO 1-3: gradients kept through a step's micro batches, reduced once per step (off by default)",
        False,
    ),
)
"""Every switch, in the order the ladder adds them."""
SWITCH_NAMES: tuple[str, ...] = tuple(switch.name for switch in SWITCHES)


def patch_line(kind: str, name: str, why: str) -> str:
    """The line rank 0 prints at the top of train.log for each change applied at launch
    (`zerolab: switch compiled_layers: ...`); zerolab.logs reads the switches back from it."""
    return f"zerolab: {kind} {name}: {why}"


def not_used_line(name: str, why: str) -> str:
    """The line a rank prints once when a switch that is on falls back to the engine's own code."""
    return f"zerolab: {name}: not used: {why}"


SWITCH_LINE = re.compile(r"^zerolab: switch (\w+): ")
NOT_USED_LINE = re.compile(r"^zerolab: (\w+): not used: ")
"""patch_line of a switch, and not_used_line, as the log reader finds them."""

LADDER_JSON = "ladder.json"
LADDER_MD = "ladder.md"


@dataclass(frozen=True)
class Phase:
    """Iterations with exactly the switches `on`, the dropout as the recipe sets it or 0."""

    name: str
    on: tuple[str, ...]
    dropout_zero: bool = False
    inspect: bool = False
    """Also profile one iteration and take the sync census of another (not timed)."""


@dataclass(frozen=True)
class Plan:
    """A ladder: its phases, iterations per phase (the first `warmup` untimed), how many rounds
    of them (the phases in turn, again: a phase's row pools its rounds, so that a slow stretch of
    the machine is spread over every phase rather than landing on one), where it writes, and the
    tokens one iteration trains on one rank (for tokens/s)."""

    phases: tuple[Phase, ...]
    out: str
    warmup: int = 1
    measured: int = 3
    tokens_per_iteration: int = 0
    rounds: int = 1

    def iterations(self) -> int:
        """Training iterations the whole ladder takes."""
        inspected = sum(2 for phase in self.phases if phase.inspect)
        return self.rounds * len(self.phases) * (self.warmup + self.measured) + inspected


def plan_text(plan: Plan) -> str:
    """`plan` as the text of ZEROLAB_LADDER (JSON)."""
    return json.dumps(asdict(plan))


def parse_plan(text: str) -> Plan:
    """The plan ZEROLAB_LADDER holds; ValueError naming what is wrong."""
    try:
        data = json.loads(text)
        phases = tuple(Phase(**{**phase, "on": tuple(phase["on"])}) for phase in data.pop("phases"))
        return Plan(phases=phases, **data)
    except (ValueError, TypeError, KeyError, AttributeError) as error:
        raise ValueError(f"{LADDER_ENV} does not hold a ladder plan ({error})") from error


# --- fine-tuning: the GLUE tasks, their files and the request ----------------------------------


@dataclass(frozen=True)
class GlueTask:
    """One GLUE task, as Hugging Face's run_glue.py reads it."""

    name: str
    sentence_keys: tuple[str, ...]
    """The columns run_glue.py tokenizes, as one sequence or a pair."""
    num_labels: int
    """Classes; 1 for STS-B's similarity score (regression)."""
    metrics: tuple[str, ...]
    """The official metrics, as zerolab.rank.glue_metrics names them."""
    eval_splits: tuple[str, ...] = ("validation",)

    @property
    def is_regression(self) -> bool:
        """Whether the label is a score (STS-B) rather than a class."""
        return self.num_labels == 1


GLUE_TASKS: dict[str, GlueTask] = {
    task.name: task
    for task in (
        GlueTask("cola", ("sentence",), 2, ("matthews_correlation",)),
        GlueTask("sst2", ("sentence",), 2, ("accuracy",)),
        GlueTask("mrpc", ("sentence1", "sentence2"), 2, ("f1", "accuracy")),
        GlueTask("qqp", ("question1", "question2"), 2, ("f1", "accuracy")),
        GlueTask("stsb", ("sentence1", "sentence2"), 1, ("pearson", "spearmanr")),
        GlueTask(
            "mnli",
            ("premise", "hypothesis"),
            3,
            ("accuracy",),
            ("validation_matched", "validation_mismatched"),
        ),
        GlueTask("qnli", ("question", "sentence"), 2, ("accuracy",)),
        GlueTask("rte", ("sentence1", "sentence2"), 2, ("accuracy",)),
        GlueTask("wnli", ("sentence1", "sentence2"), 2, ("accuracy",)),
    )
}
"""The nine GLUE tasks: each task's sentence columns, its label count (STS-B: one regression
output), the validation splits it is scored on and its official metrics (GLUE's: CoLA Matthews
correlation, STS-B Pearson and Spearman, MRPC and QQP F1 and accuracy, the rest accuracy; MNLI on
its matched and mismatched validation sets)."""

TRAIN_SPLIT = "train"


def split_file(folder: str | Path, task: GlueTask, split: str) -> Path:
    """The JSON Lines file of `task`'s `split` (train, validation, validation_matched ...) in
    `folder`: FOLDER/TASK_SPLIT.jsonl, each line a row in GLUE's columns on the hub."""
    return Path(folder) / f"{task.name}_{split}.jsonl"


def task_splits(task: GlueTask) -> tuple[str, ...]:
    """The splits a fine-tuning of `task` reads: train, then the ones it is scored on."""
    return (TRAIN_SPLIT, *task.eval_splits)


@dataclass(frozen=True)
class FinetuneRequest:
    """RUN_DIR/request.json: one fine-tuning's model, data, length, schedule. The folder it is in is
    the run directory: the loop reads the DeepSpeed config there and writes its records, TensorBoard
    events and W&B run there; no path in it names the run directory, so that a render printed
    before the directory exists is the request the launch writes."""

    model: str
    """A Hugging Face GPT-2 folder, a hub name, or a run directory (see `exported`)."""
    exported: bool
    """The model is a run directory's checkpoint, exported into RUN_DIR/model before the ranks start."""
    task: str
    """The GLUE task (GLUE_TASKS)."""
    train_file: str
    eval_files: dict[str, str]
    """{split: file} of the validation splits scored after each epoch."""
    max_seq_length: int
    epochs: int
    lr_schedule: str
    """linear, cosine or constant, after the warm-up (transformers' schedules, which end at 0)."""
    warmup_steps: int
    weight_decay: float
    """For all weights but biases and layer norms, as Hugging Face's Trainer decays them."""
    seed: int
    shuffle: bool
    log_interval: int
    """Steps between the progress lines rank 0 prints."""
    attention: str
    """transformers' attn_implementation: eager, sdpa or flash_attention_2."""
    gradient_checkpointing: bool
    config: dict[str, Any]
    """GPT2Config keys set over the model's own: dropouts, initializer range."""
    tensorboard: bool = False
    """Write TensorBoard events into RUN_DIR/tensorboard."""
    wandb: dict[str, str] | None = None
    """{project, name} of a Weights & Biases run kept in RUN_DIR/wandb, or None."""

    def as_json(self) -> dict[str, Any]:
        """The request as request.json holds it."""
        return dataclasses.asdict(self)


def request_text(request: FinetuneRequest | Fsdp2Request) -> str:
    """`request` (a fine-tuning's or an FSDP2 run's) as request.json's text."""
    return json.dumps(request.as_json(), indent=2) + "\n"


def parse_finetune_request(path: str | Path) -> FinetuneRequest:
    """The request in `path`; ValueError naming the file when it is not one."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        return FinetuneRequest(**data)
    except (OSError, ValueError, TypeError) as error:
        raise ValueError(f"{path}: not a fine-tuning request ({error})") from None


# --- the second engine: PyTorch FSDP2 on the recipe's model, data and schedule ---------------

ENGINE_LAYERNORM_EPSILON = 1e-5
"""The engine's layer-norm epsilon (Megatron's --layernorm-epsilon default), GPT-2's."""
ENGINE_GELU = "gelu_new"
"""The engine's GeLU as transformers names it: its bias-GeLU fusion, on unless --no-bias-gelu-fusion
(zerolab never renders that), computes the tanh approximation."""


@dataclass(frozen=True)
class Fsdp2Request:
    """RUN_DIR/request.json of an FSDP2 run (zerolab.rank.fsdp2_train): the recipe's model, data,
    batches, optimizer and schedule, in the terms Megatron's own code takes them (the loop builds the
    engine's dataset and learning-rate scheduler from them), and how the model is sharded. As a
    fine-tuning's, no path in it names the run directory: the loop writes there."""

    engine: str
    """The Megatron-DeepSpeed checkout whose dataset and scheduler code give the samples and rates."""
    model: dict[str, Any]
    """GPT2Config's keys: the recipe's shape, the padded vocabulary, dropouts, activation, epsilon."""
    init_from: str | None
    """An imported folder's one-layout checkpoint (`zerolab import`, tag tp1_pp1), else random weights."""
    data_path: list[str] | None
    """Megatron's --data-path words (a prefix, or weight prefix pairs), dealt by `split`."""
    split: str
    train_data_path: list[str] | None
    valid_data_path: list[str] | None
    test_data_path: list[str] | None
    data_impl: str
    seq_length: int
    seed: int
    micro_batch_size: int
    global_batch_size: int
    train_iters: int
    lr: float
    min_lr: float
    lr_decay_style: str
    lr_warmup_iters: int
    weight_decay: float
    adam_beta1: float
    adam_beta2: float
    adam_eps: float
    clip_grad: float
    log_interval: int
    eval_interval: int
    eval_iters: int
    save_interval: int | None
    """Iterations between checkpoints into RUN_DIR/checkpoints (and at the end), or None."""
    load: str | None
    """A checkpoints folder of an FSDP2 run to resume from (its latest iteration), or None."""
    override_scheduler: bool
    """Resuming under another schedule: the recipe's, at the samples already trained, not the saved one
    (Megatron's --override-opt_param-scheduler)."""
    sharding: str
    """`ddp` (whole weights, gradients averaged), or `fsdp2` (fully_shard per layer and at the root)."""
    reshard_after_forward: bool
    """FSDP2: free each layer's gathered weights after its forward (ZeRO-3), or keep them (ZeRO-1/2)."""
    cpu_offload: bool
    """FSDP2: weights, gradients and optimizer states on the host between uses (CPUOffloadPolicy)."""
    precision: str
    """fp32 or bf16 (MixedPrecisionPolicy: bf16 weights and activations, fp32 reduction)."""
    recompute: bool
    """Every layer's activations recomputed in the backward pass (torch.utils.checkpoint)."""
    attention: str
    """transformers' attn_implementation: eager or sdpa."""

    def as_json(self) -> dict[str, Any]:
        """The request as request.json holds it."""
        return dataclasses.asdict(self)


def parse_fsdp2_request(path: str | Path) -> Fsdp2Request:
    """The request in `path`; ValueError naming the file when it is not one."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        return Fsdp2Request(**data)
    except (OSError, ValueError, TypeError) as error:
        raise ValueError(f"{path}: not an FSDP2 request ({error})") from None


def memory_line(rank: int, iteration: int, *megabytes: float) -> str:
    """Megatron's memory report of one rank: allocated, max allocated, reserved, max reserved (MB)."""
    names = ("allocated", "max allocated", "reserved", "max reserved")
    figures = " | ".join(f"{name}: {value}" for name, value in zip(names, megabytes, strict=True))
    return f"[Rank {rank}] (after {iteration} iterations) memory (MB) | {figures}"


FSDP2_PROGRESS_FILE = "zerolab-progress.json"
"""In each step_folder of an FSDP2 run, beside torch.distributed.checkpoint's files: the iteration,
samples, the learning-rate scheduler's state and the model's GPT2Config keys (its request's `model`)."""

_ITERATION_FORMS = {"lm loss": ".6E", "learning rate": ".3E"}
"""Megatron's own forms of these segments (the loss to 1e-5 of a loss of about 10)."""


def iteration_line(values: dict[str, Any]) -> str:
    """The iteration line the FSDP2 loop prints, in Megatron's words and order (zerolab.logs reads
    both alike): `iteration`, `train_iters` and then the segments given, e.g. `lm loss`."""
    segments = [f" iteration {values['iteration']:8d}/{values['train_iters']:8d} "]
    for key, value in values.items():
        if key in ("iteration", "train_iters"):
            continue
        form = _ITERATION_FORMS.get(key, ".3f") if isinstance(value, float) else ""
        text = format(value, form)
        segments.append(f" {key}: {text} ")
    return "|".join(segments) + "|"
