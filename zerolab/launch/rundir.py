"""The run directory `logs/NAME/YYYYmmdd-HHMMSS/` (docs/run-directory.md): created once,
never overwritten; its small files written whole (write to a temporary file, then rename)."""

from __future__ import annotations

import json
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from zerolab.errors import UserError
from zerolab.files import write_atomic, write_json_atomic

RECIPE_FILE = "recipe.yaml"
DS_CONFIG_FILE = "ds_config.json"
COMMAND_FILE = "command.sh"
DOCTOR_FILE = "doctor.json"
RUN_FILE = "run.json"
LOG_FILE = "train.log"
SAMPLES_FILE = "samples.csv"
STATUS_FILE = "status.json"
CHECKPOINTS_DIR = "checkpoints"
TENSORBOARD_DIR = "tensorboard"
WANDB_DIR = "wandb"

STAMP_FORMAT = "%Y%m%d-%H%M%S"


def new_run_dir(logs_root: Path, name: str) -> Path:
    """Create `logs_root/name/<local time, to the second>/`; if that second's directory exists
    (two launches within one second), wait for the next second rather than reuse it."""
    parent = logs_root / name
    parent.mkdir(parents=True, exist_ok=True)
    for _ in range(5):
        candidate = parent / datetime.now().strftime(STAMP_FORMAT)
        try:
            candidate.mkdir()
        except FileExistsError:
            time.sleep(1.0 - (time.time() % 1.0) + 0.01)
            continue
        return candidate
    raise UserError(f"{parent}: could not create a new run directory (one exists for every recent second)")


def claim_run_dir(path: Path) -> Path:
    """Create the run directory `path` given by the user; an existing one is refused, never reused."""
    if path.exists():
        raise UserError(f"{path} already exists: a run directory is never overwritten; choose a new path")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.mkdir()
    return path


def write_text(path: Path, text: str, *, mode: int | None = None) -> None:
    """Write `text` to `path` whole: readers never see half a file."""
    write_atomic(path, text, mode=mode)


def write_json(path: Path, data: Any) -> None:
    """Write `data` as indented JSON, whole."""
    write_json_atomic(path, data)


def read_json(path: Path) -> Any:
    """Read a JSON file of a run directory."""
    return json.loads(path.read_text())
