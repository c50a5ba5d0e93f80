"""The run directory, `logs/NAME/YYYYmmdd-HHMMSS/` (docs/run-directory.md): its file names, the
typed contents of run.json (RunFacts) and status.json (Status), and the one place they are
created, written and read: by `zerolab launch`, by the sbatch job (which writes status.json
with the lines `status_shell` gives it) and by `zerolab summarize`. A run directory is never
overwritten; its small files are written whole."""

from __future__ import annotations

import contextlib
import json
import shlex
import shutil
import time
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from zerolab.contracts import CHECKPOINTS_DIR, DS_CONFIG_FILE, LATEST_CHECKPOINT, STEP_PREFIX
from zerolab.errors import Interrupted, UserError
from zerolab.files import write_atomic, write_json_atomic

RECIPE_FILE = "recipe.yaml"
RECIPE_END = "# end of the resolved recipe"
"""The last line of every resolved recipe zerolab writes (recipe.yaml): a copy cut at a line boundary
is still valid YAML whose missing keys would take their defaults, so a recipe.yaml without it is
refused as cut short (whole_recipe)."""
COMMAND_FILE = "command.sh"
DOCTOR_FILE = "doctor.json"
RUN_FILE = "run.json"
LOG_FILE = "train.log"
SAMPLES_FILE = "samples.csv"
STATUS_FILE = "status.json"
EVAL_FILE = "eval.json"
HOSTFILE = "hostfile"
JOB_SCRIPT_FILE = "job.sbatch"
"""The script `zerolab launch --slurm` submitted (`sbatch job.sbatch` submits it again)."""
DEEPSPEED_ENV_FILE = "deepspeed_env"
"""The launch's environment for the ranks the deepspeed launcher starts over ssh (DS_ENV_FILE)."""
MARKERS = (RUN_FILE, LOG_FILE, STATUS_FILE)
"""A directory holding any of these is a run directory."""

STAMP_FORMAT = "%Y%m%d-%H%M%S"

State = Literal["running", "completed", "failed", "killed", "refused"]
"""status.json's `state`; `refused`: a sweep's cell whose recipe was refused before launch (its
directory holds only status.json)."""
RUNNING, COMPLETED, FAILED, KILLED, REFUSED = get_args(State)

Count = Annotated[int, Field(ge=0, le=2**63 - 1)]
"""A size or count: a whole number >= 0 that fits in 64 bits."""


class RunFacts(BaseModel):
    """run.json: the facts of the run a summary needs; a value that is not known is null."""

    model_config = ConfigDict(extra="ignore")

    name: str | None = None
    recipe: str | None = None
    model: str | None = None
    num_layers: Count | None = None
    hidden_size: Count | None = None
    num_attention_heads: Count | None = None
    seq_length: Count | None = None
    padded_vocab_size: Count | None = None
    world_size: Count | None = None
    nodes: Count | None = None
    procs_per_node: Count | None = None
    tensor_parallel: Count | None = None
    pipeline_parallel: Count | None = None
    data_parallel: Count | None = None
    zero_stage: Annotated[int, Field(ge=0, le=3)] | None = None
    offload_optimizer: bool | None = None
    offload_param: bool | None = None
    hpz_partition_size: Count | None = None
    """ZeRO++ hpZ's secondary partition of the weights (zero.hpz_partition_size); null: none."""
    quantized_weights: bool | None = None
    quantized_gradients: bool | None = None
    mics_shard_size: Count | None = None
    """MiCS's shard of the model states (zero.mics_shard_size); null: none."""
    engine: str | None = None
    """What trained the run: `megatron-deepspeed` (pretrain_gpt.py), `fsdp2` (zerolab's FSDP2 loop) or
    `deepspeed` (the fine-tuning loop)."""
    fsdp2_setup: str | None = None
    """An FSDP2 run's zero section as FSDP2 trained it (`fully_shard, weights resharded after forward`)."""
    recompute_granularity: str | None = None
    attention: str | None = None
    micro_batch_size: Count | None = None
    global_batch_size: Count | None = None
    gradient_accumulation_steps: Count | None = None
    precision: str | None = None
    device: str | None = None
    train_iters: Count | None = None
    log_interval: Count | None = None
    epoch_tokens: Count | None = None
    init_from: str | None = None
    """The folder of `zerolab import` the run started from (model.init_from), resolved; null: random."""
    init_source: str | None = None
    """The Hugging Face directory or hub name those weights were imported from."""
    task: str | None = None
    """The GLUE task of a fine-tuning run (finetune.task); null: pretraining."""
    model_source: str | None = None
    """What a fine-tuning run fine-tuned (finetune.model: a folder, hub name or run directory)."""
    resumed_from: str | None = None
    """The run directory whose checkpoint the run continues (`--resume`); null: it started afresh."""
    resumed_iteration: Count | None = None
    """The iteration of that checkpoint."""
    resumed_setup: str | None = None
    """The setup that checkpoint was saved under (`z1 dp2 tp1 pp1`): another than the run's own, the
    checkpoint was continued through DeepSpeed's universal format."""
    master_port: Annotated[int, Field(gt=0, lt=65536)] | None = None
    """The rendezvous port the launch used: hardware.master_port, or the free port a one-node launch
    took where it is not set."""


class Status(BaseModel):
    """status.json: how the run is going or ended."""

    model_config = ConfigDict(extra="ignore")

    state: State
    exit_code: int | None = None
    started: str | None = None
    ended: str | None = None
    cause: str | None = None
    """One line, when failed, killed or refused: a rank killed by a signal, the first error, the
    exit code, or why the checks refused the recipe."""
    last_lines: list[str] = []
    """When a rank was killed by a signal: the last lines it printed before it."""


EvalTask = Literal["val", "wikitext", "hellaswag"]
"""`zerolab eval`'s tasks."""
Scorer = Literal["zerolab", "lm-eval"]
"""What computed a task's log-likelihoods: zerolab's own scorer, or lm-evaluation-harness (hellaswag)."""
EVAL_METRICS: dict[str, tuple[str, ...]] = {
    "val": ("loss", "ppl"),
    "wikitext": ("loss", "ppl"),
    "hellaswag": ("acc", "acc_norm", "acc_norm_chars"),
}
"""Each task's metrics in eval.json, in order."""


SAME_WEIGHTS = 1e-4
"""Weights no further apart than this (in any tensor, absolute) are scored as one model. ZeRO's
stages add gradients up in other orders, so the CPU demo's five setups end 60 iterations about
7.4e-5 apart (measured 2026-11-26; initial weights have a standard deviation of 0.02), and every
score of the five agrees to its four printed digits."""


class TaskScore(BaseModel):
    """One task's result in eval.json (`zerolab eval`)."""

    model_config = ConfigDict(extra="ignore")

    metrics: dict[str, float]
    """`loss` and `ppl` (val, wikitext); `acc`, `acc_norm` (per token) and `acc_norm_chars` (per
    character, lm-evaluation-harness's acc_norm) (hellaswag)."""
    iteration: int | None = None
    """The checkpoint's iteration."""
    data: str
    """Where the examples came from: `sample` (shipped with zerolab), `hub` (Hugging Face) or `run`
    (the run's own validation documents)."""
    examples: Count
    """Windows scored (val, wikitext) or tasks answered (hellaswag)."""
    tokens: Count | None = None
    """Tokens predicted (val, wikitext)."""
    scorer: Scorer = "zerolab"
    """What computed the log-likelihoods: `zerolab` or `lm-eval` (lm-evaluation-harness)."""
    evaluated: str
    """When, UTC, ISO 8601."""
    same_weights_as: str | None = None
    """The run whose checkpoint was scored for this one: the two checkpoints hold the same weights
    (within SAME_WEIGHTS), so their scores are the same (the CPU demo scores once)."""
    weights_difference: float | None = None
    """With same_weights_as: the largest absolute difference between the two checkpoints' weights."""


class EvalResults(BaseModel):
    """eval.json: the latest score of each task."""

    model_config = ConfigDict(extra="ignore")

    tasks: dict[str, TaskScore] = {}


def now_iso() -> str:
    """The current time, UTC, ISO 8601 to the second."""
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def is_run_dir(path: Path) -> bool:
    """Whether `path` is a run directory."""
    return any((path / marker).is_file() for marker in MARKERS)


def new_path(parent: Path, prefix: str = "") -> Path:
    """A run directory not made yet, `parent/PREFIX<local time, to the second>/` (a launch's
    logs/NAME/STAMP, a ladder's logs/ladder/NAME-STAMP); if that second's exists (two launches
    within one second), the next second's, after waiting for it."""
    for _ in range(5):
        candidate = parent / f"{prefix}{datetime.now().strftime(STAMP_FORMAT)}"
        if not candidate.exists():
            return candidate
        time.sleep(1.0 - (time.time() % 1.0) + 0.01)
    raise UserError(f"{parent}: could not create a new run directory (one exists for every recent second)")


@contextlib.contextmanager
def made(path: Path) -> Iterator[Path]:
    """The new run directory `path` (claim: a path given, or new_path's), for a launch to write
    into before its ranks start: when the block raises (a refusal, a failed export, Ctrl-C), the
    directory is removed again with what was written into it, and so are the parent folders it
    made, so that a launch refused there leaves nothing behind (Ctrl-C: errors.Interrupted says so)."""
    parents = [folder for folder in path.parents if not folder.exists()]
    directory = claim(path)
    try:
        yield directory
    except BaseException as error:
        shutil.rmtree(directory, ignore_errors=True)
        for folder in parents:
            with contextlib.suppress(OSError):  # not empty: another run is in it
                folder.rmdir()
        if isinstance(error, KeyboardInterrupt) and not isinstance(error, Interrupted):
            raise Interrupted(
                f"nothing was launched, and the run directory {directory} was removed"
            ) from None
        raise


def claim(path: Path) -> Path:
    """Create the run directory `path` given by the user; an existing one is refused, never reused
    (one made by another launch given the same path at the same moment too: mkdir decides), and so
    is a path under a file or one that cannot be made."""
    exists = f"{path} already exists: a run directory is never overwritten; choose a new path"
    if path.exists():
        raise UserError(exists)
    taken = next((parent for parent in path.parents if parent.exists() and not parent.is_dir()), None)
    if taken is not None:
        raise UserError(
            f"--run-dir {path}: {taken} is a file, so no folder can be made there; choose another path"
        )
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.mkdir()
    except FileExistsError:
        raise UserError(exists) from None
    except OSError as error:
        raise UserError(f"--run-dir {path}: cannot make it ({error.strerror}); choose another path") from None
    return path


def write_recipe(run_dir: Path, text: str) -> None:
    """recipe.yaml: the fully resolved recipe (zerolab.recipe.output.resolved_yaml, which ends with
    RECIPE_END)."""
    write_atomic(run_dir / RECIPE_FILE, text)


def whole_recipe(run_dir: Path) -> Path:
    """`run_dir`'s recipe.yaml, for every command that reads a run's recipe (resume, sweep --resume,
    summarize, export, eval, fine-tuning from a run); UserError naming the file and the fix when it
    is there but does not end with RECIPE_END (cut short: the keys after the cut would silently
    take their defaults). Whether a missing one is an error is the caller's."""
    path = run_dir / RECIPE_FILE
    if not path.is_file():
        return path
    lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    if lines and lines[-1] == RECIPE_END:
        return path
    facts, _ = read_facts(run_dir)
    anew = f": zerolab launch {facts.recipe}" if facts and facts.recipe else ""
    raise UserError(
        f"{path}: cut short (its last line is not `{RECIPE_END}`, which zerolab writes last; "
        f"{len(lines)} line(s) left): copy the run directory again from where it was written whole, "
        f"or launch its recipe anew{anew}"
    )


def write_ds_config(run_dir: Path, config: dict[str, Any]) -> None:
    """ds_config.json: the DeepSpeed config the engine reads."""
    write_json_atomic(run_dir / DS_CONFIG_FILE, config)


def write_command(run_dir: Path, script: str) -> None:
    """command.sh, executable."""
    write_atomic(run_dir / COMMAND_FILE, script, mode=0o755)


def write_deepspeed_env(run_dir: Path, env: dict[str, str]) -> None:
    """deepspeed_env: NAME=VALUE lines, the format of DeepSpeed's `.deepspeed_env`; its launcher
    exports them on every node it starts over ssh (it passes on only a few variables itself)."""
    write_atomic(run_dir / DEEPSPEED_ENV_FILE, "".join(f"{name}={value}\n" for name, value in env.items()))


def read_deepspeed_env(directory: Path) -> dict[str, str]:
    """The NAME=VALUE lines of DeepSpeed's own `.deepspeed_env` in `directory` ({} without one),
    read as its launcher reads them (lines without `=` left out)."""
    path = directory / ".deepspeed_env"
    if not path.is_file():
        return {}
    pairs = (line.split("=", 1) for line in path.read_text(errors="replace").splitlines() if "=" in line)
    return {name.strip(): value.strip() for name, value in pairs}


def write_job_script(run_dir: Path, script: str) -> None:
    """job.sbatch: the sbatch script a SLURM job was submitted with."""
    write_atomic(run_dir / JOB_SCRIPT_FILE, script)


def write_doctor(run_dir: Path, report: dict[str, Any]) -> None:
    """doctor.json: `zerolab doctor --json` at launch."""
    write_json_atomic(run_dir / DOCTOR_FILE, report)


def write_facts(run_dir: Path, facts: RunFacts) -> None:
    """run.json."""
    write_json_atomic(run_dir / RUN_FILE, facts_json(facts))


def facts_json(facts: RunFacts) -> dict[str, Any]:
    """run.json's object (what a job script embeds)."""
    return facts.model_dump(mode="json")


def write_status(run_dir: Path, status: Status) -> Status:
    """status.json; returns what was written."""
    write_json_atomic(run_dir / STATUS_FILE, status.model_dump(mode="json"))
    return status


def write_refusal(run_dir: Path, message: str) -> Status:
    """status.json of a run the checks refused before launch (a sweep's cell): state `refused`,
    the message as its one-line cause."""
    return write_status(run_dir, Status(state=REFUSED, ended=now_iso(), cause=one_line(message)))


def write_eval(run_dir: Path, scores: dict[str, TaskScore]) -> EvalResults:
    """eval.json with `scores` put in place of those tasks' earlier scores; returns what was written."""
    earlier, _ = read_eval(run_dir)
    results = EvalResults(tasks={**(earlier.tasks if earlier else {}), **scores})
    write_json_atomic(run_dir / EVAL_FILE, results.model_dump(mode="json"))
    return results


def read_eval(run_dir: Path) -> tuple[EvalResults | None, list[str]]:
    """eval.json (None when absent or unreadable) and what could not be read in it."""
    return _read_model(run_dir / EVAL_FILE, EvalResults)


def one_line(text: str) -> str:
    """`text` on one line: its lines stripped and joined by a space."""
    return " ".join(line.strip() for line in text.splitlines() if line.strip())


def read_facts(run_dir: Path) -> tuple[RunFacts | None, list[str]]:
    """run.json (None when absent or unreadable) and what could not be read in it."""
    return _read_model(run_dir / RUN_FILE, RunFacts)


def read_status(run_dir: Path) -> tuple[Status | None, list[str]]:
    """status.json (None when absent or unreadable) and what could not be read in it."""
    return _read_model(run_dir / STATUS_FILE, Status)


def run_name(run_dir: Path) -> str:
    """The run's name from its run.json; UserError when it has none."""
    facts, problems = read_facts(run_dir)
    if facts is None or not facts.name:
        why = "; ".join(problems) or f"{RUN_FILE} has no name"
        raise UserError(f"{run_dir}: not a run directory zerolab can resume ({why})")
    return facts.name


def last_checkpoint(run_dir: Path) -> int | None:
    """The iteration of the last checkpoint saved in `run_dir`, or None when it has none."""
    try:
        return int((run_dir / CHECKPOINTS_DIR / LATEST_CHECKPOINT).read_text().strip())
    except (FileNotFoundError, ValueError):
        return None


def saved_iterations(run_dir: Path) -> list[int]:
    """The iterations of the checkpoints in `run_dir`, in order."""
    folder = run_dir / CHECKPOINTS_DIR
    steps = [p.name[len(STEP_PREFIX) :] for p in folder.glob(f"{STEP_PREFIX}*") if p.is_dir()]
    return sorted(int(step) for step in steps if step.isdigit())


def status_shell(run_dir: str, state: str, exit_code: str, started: str, ended: str) -> str:
    """A shell command that writes status.json as `write_status` would (every Status field; a test
    reads it back), for a job script: the arguments are shell words (expansions such as
    "${exit_code}"); `exit_code` expands to a number."""
    template = (
        '{"state": "%s", "exit_code": %d, "started": "%s", "ended": "%s", "cause": null, "last_lines": []}'
    )
    return (
        f"printf '{template}\\n' {state} {exit_code} {started} {ended} > {run_dir}/{shlex.quote(STATUS_FILE)}"
    )


ModelT = TypeVar("ModelT", bound=BaseModel)


def _read_model(path: Path, model: type[ModelT]) -> tuple[ModelT | None, list[str]]:
    """The model read from a JSON file, leaving out (and naming) the values it cannot take: of
    another JSON type (`"2"` or `true` for a number) or out of range."""
    if not path.is_file():
        return None, []
    try:
        data = json.loads(path.read_text(encoding="utf-8", errors="replace"))
    except (OSError, ValueError) as error:
        return None, [f"{path.name}: not readable JSON ({error})"]
    if not isinstance(data, dict):
        return None, [f"{path.name}: not a JSON object"]
    problems: list[str] = []
    while True:
        try:
            return model.model_validate(data, strict=True), problems
        except ValidationError as error:
            bad = {str(item["loc"][0]) for item in error.errors() if item["loc"] and item["loc"][0] in data}
            problems += [
                f"{path.name}: `{'.'.join(str(part) for part in item['loc'])}`: {item['msg']}"
                + (" (left out)" if item["loc"] and item["loc"][0] in data else "")
                for item in error.errors()
            ]
            if not bad:
                return None, problems
            data = {key: value for key, value in data.items() if key not in bad}
