"""What `zerolab eval` and `zerolab generate` read: TARGET, a run directory, one of its checkpoints
(RUN/checkpoints/global_stepN), a Hugging Face GPT-2 folder or, on a machine with network, a hub
name (`openai-community/gpt2`). A run's checkpoint is exported (zerolab export) into a temporary
folder that is gone afterwards."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from zerolab.contracts import STEP_PREFIX
from zerolab.errors import UserError
from zerolab.export.run import export_run
from zerolab.hf_folder import ask_hub, cached_hub_folder, looks_like_path, weights_problem
from zerolab.rundir import CHECKPOINTS_DIR, is_run_dir

WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin")
TOKENIZER_FILES = (("tokenizer.json",), ("vocab.json", "merges.txt"))


@dataclass(frozen=True)
class Model:
    """A Hugging Face GPT-2 to load: `source` (a folder or a hub name), the run and checkpoint
    iteration it was exported from (None for a model folder)."""

    source: str
    run_dir: Path | None
    iteration: int | None


@contextmanager
def hf_model(target: str, iteration: int | None = None) -> Iterator[Model]:
    """The model TARGET names, exported for the duration of the block when it is a run's checkpoint."""
    path = Path(target)
    run_dir, step = _run_and_step(path, iteration)
    if run_dir is None:
        if iteration is not None:
            raise UserError(f"--iteration {iteration}: {target} is a model folder, not a run directory")
        if looks_like_path(target):
            check_gpt2_folder(path)
            yield Model(str(path), None, None)
        else:
            yield Model(_hub_source(target), None, None)
        return
    with tempfile.TemporaryDirectory(prefix="zerolab-eval-") as scratch:
        exported = export_run(run_dir, Path(scratch) / "hf", step)
        yield Model(str(exported.out), run_dir, exported.iteration)


def _run_and_step(path: Path, iteration: int | None) -> tuple[Path | None, int | None]:
    if path.name.startswith(STEP_PREFIX) and path.parent.name == CHECKPOINTS_DIR and path.is_dir():
        step = path.name.removeprefix(STEP_PREFIX)
        if not step.isdigit() or (iteration is not None and int(step) != iteration):
            raise UserError(f"{path}: give the run directory with --iteration N, or one checkpoint folder")
        return path.parent.parent, int(step)
    if path.is_dir() and is_run_dir(path):
        return path, iteration
    return None, None


def _hub_source(name: str) -> str:
    """What the engine's Python loads for hub model `name`: the name, where the hub has it (transformers
    fetches it), or this machine's cached copy where the hub cannot be reached; UserError at once,
    naming the model and the fix, otherwise (not after huggingface_hub's retries of about 40 s)."""
    hub = ask_hub(name)
    if hub.problem is None:
        return name
    cached = None if hub.reached else cached_hub_folder(name)
    if cached is None:
        copy = "" if hub.reached else ", nor has this machine a copy in its Hugging Face cache"
        raise UserError(
            f"{name}: no such folder here, and {hub.problem}{copy}; give a run directory or a GPT-2 "
            "folder (`zerolab export RUN_DIR --out DIR` writes one), or a hub name where the hub can be "
            "reached"
        )
    check_gpt2_folder(cached)
    return str(cached)


def check_gpt2_folder(path: Path) -> None:
    """UserError naming what is missing when `path` is not a Hugging Face GPT-2 folder with its tokenizer
    and whole weights files."""
    if not path.exists():
        raise UserError(
            f"{path}: no such folder; give a run directory, one of its checkpoints (RUN/checkpoints/"
            "global_stepN) or a Hugging Face GPT-2 folder (`zerolab export RUN_DIR --out DIR` writes one)"
        )
    config_file = path / "config.json"
    if not config_file.is_file():
        raise UserError(
            f"{path}: not a run directory (run.json, train.log), a checkpoint (RUN/checkpoints/"
            "global_stepN) or a Hugging Face model folder (config.json); give one of those, or write one "
            "with `zerolab export RUN_DIR --out DIR`"
        )
    try:
        model_type = json.loads(config_file.read_text(encoding="utf-8")).get("model_type")
    except (ValueError, AttributeError) as error:
        raise UserError(f"{config_file}: not a readable config.json ({error})") from None
    if model_type != "gpt2":
        raise UserError(
            f"{config_file}: model_type is {model_type!r}, not 'gpt2': zerolab evaluates and samples GPT-2 "
            "models (GPT2LMHeadModel); give a GPT-2 folder, e.g. one written by `zerolab export`"
        )
    if not any((path / name).is_file() for name in WEIGHT_FILES):
        raise UserError(
            f"{path}: no weights ({' or '.join(WEIGHT_FILES)}); save the model with save_pretrained"
        )
    if not any(all((path / name).is_file() for name in names) for names in TOKENIZER_FILES):
        raise UserError(
            f"{path}: no GPT-2 tokenizer (tokenizer.json, or vocab.json and merges.txt); save it beside "
            "the weights: AutoTokenizer.from_pretrained('openai-community/gpt2').save_pretrained(DIR)"
        )
    unreadable = weights_problem(path)
    if unreadable:
        raise UserError(unreadable)
