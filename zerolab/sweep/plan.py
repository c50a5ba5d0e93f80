"""The sweep directory, `logs/sweeps/NAME/` (docs/sweep.md): its file names, `sweep.json` (the
command and its cells, `Plan`), where each cell's run directory is and where an earlier attempt
of a cell goes, the lock that keeps two sweeps out of one directory, and every read and write
of them. Each cell's run directory is a run directory like any other (zerolab.rundir owns its
files, status.json included); the state of a cell is its status.json."""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from zerolab import __version__, rundir
from zerolab.contracts import LockHeld, holding
from zerolab.errors import UserError
from zerolab.files import folders_made, write_json_atomic
from zerolab.locations import SWEEPS_DIR
from zerolab.sweep.cells import Sweep

"""Where sweep directories go, relative to the current directory (where runs start)."""
PLAN_FILE = "sweep.json"
SBATCH_FILE = "sweep.sbatch"
PREVIOUS_DIR = ".previous"
"""Earlier attempts of cells run again (killed, failed and retried): kept, not summarized."""
LOCK_FILE = ".lock"
SCHEMA_VERSION = 1

UNKNOWN = "unknown"
"""The state of a cell whose directory has no readable status.json (a sweep stopped as it began)."""


class PlannedKey(BaseModel):
    """A swept key and its values, in sweep order."""

    model_config = ConfigDict(extra="ignore")

    key: str
    values: list[Any]


class PlannedCell(BaseModel):
    """A cell: its name, overrides, each swept key's value, and its run directory (relative to
    the sweep directory)."""

    model_config = ConfigDict(extra="ignore")

    name: str
    overrides: list[str]
    values: dict[str, Any]
    run_dir: str


class Plan(BaseModel):
    """sweep.json: the command (recipe, words, swept keys and values, fixed overrides) and its
    cells, in the order they run."""

    model_config = ConfigDict(extra="ignore")

    schema_version: int = SCHEMA_VERSION
    name: str
    recipe: str
    words: list[str]
    swept: list[PlannedKey]
    fixed: list[str]
    cells: list[PlannedCell]
    resume: str | None = None
    """The run whose checkpoint every cell continues (`--resume RUN_DIR`); null: each starts afresh."""
    created: str | None = None
    zerolab: str | None = None

    @property
    def keys(self) -> list[str]:
        """The swept keys, in the order given."""
        return [entry.key for entry in self.swept]

    def command(self) -> str:
        """The sweep as a command line."""
        if self.resume is not None:
            return " ".join(["zerolab sweep", *self.words, "--resume", self.resume, "--name", self.name])
        return " ".join(["zerolab sweep", self.recipe, *self.words, "--name", self.name])

    def launch_words(self, cell: PlannedCell) -> tuple[list[str], Path | None]:
        """What a cell launches: its recipe and overrides, or with `resume` the overrides of the run
        it continues (zerolab.launch.plan's words and resume)."""
        if self.resume is not None:
            return list(cell.overrides), Path(self.resume)
        return [self.recipe, *cell.overrides], None

    def same_sweep(self, other: Plan) -> bool:
        """Whether `other` runs the same cells of the same recipe."""
        return (
            self.recipe == other.recipe
            and self.resume == other.resume
            and [(c.name, c.overrides) for c in self.cells] == [(c.name, c.overrides) for c in other.cells]
        )


def plan_of(sweep: Sweep, name: str, recipe_shown: str, resume: str | None = None) -> Plan:
    """The plan of an expanded sweep named `name`; `recipe_shown` is the recipe file as recorded,
    `resume` the run every cell continues."""
    return Plan(
        name=name,
        recipe=recipe_shown,
        resume=resume,
        words=list(sweep.words),
        swept=[PlannedKey(key=entry.key, values=list(entry.values)) for entry in sweep.swept],
        fixed=list(sweep.fixed),
        cells=[
            PlannedCell(name=cell.name, overrides=list(cell.overrides), values=cell.values, run_dir=cell.name)
            for cell in sweep.cells
        ],
        created=rundir.now_iso(),
        zerolab=__version__,
    )


def sweep_dir(name: str, root: Path = SWEEPS_DIR) -> Path:
    """The directory of the sweep named `name`."""
    return root / name


def cell_dir(directory: Path, cell: PlannedCell) -> Path:
    """The run directory of `cell` in the sweep directory `directory`."""
    return directory / cell.run_dir


def write_plan(directory: Path, plan: Plan) -> None:
    """sweep.json."""
    write_json_atomic(directory / PLAN_FILE, plan.model_dump(mode="json"))


def read_plan(directory: Path) -> tuple[Plan | None, str | None]:
    """sweep.json of `directory` (None when there is none or it is unreadable) and, when unreadable, why."""
    path = directory / PLAN_FILE
    if not path.is_file():
        return None, None
    try:
        return Plan.model_validate(json.loads(path.read_text(encoding="utf-8", errors="replace"))), None
    except (OSError, ValueError, ValidationError) as error:
        return None, f"{path}: not a sweep plan zerolab can read ({str(error).splitlines()[0]})"


def check_same_sweep(directory: Path, plan: Plan) -> Plan | None:
    """The plan already in `directory`, if any; UserError when it is another sweep (or unreadable)."""
    existing, problem = read_plan(directory)
    if problem:
        raise UserError(f"{problem}; move {directory} away or give another --name")
    if existing is None:
        if directory.exists() and any(not entry.name.startswith(".") for entry in directory.iterdir()):
            raise UserError(f"{directory} exists and holds no {PLAN_FILE}; give another --name")
        return None
    if not existing.same_sweep(plan):
        raise UserError(
            f"{directory} holds another sweep:\n  {existing.command()}\nnot\n  {plan.command()}\n"
            "give this one its own --name (or move that directory away)"
        )
    return existing


def cell_state(directory: Path, cell: PlannedCell) -> str | None:
    """The state of `cell`: None when it has no run directory, else its status.json's state
    (`completed`, `failed`, `killed`, `running`, `refused`), or `unknown` when unreadable."""
    run_dir = cell_dir(directory, cell)
    if not run_dir.exists():
        return None
    status, _ = rundir.read_status(run_dir)
    return status.state if status else UNKNOWN


def move_aside(directory: Path, cell: PlannedCell, state: str | None) -> Path:
    """Move the earlier attempt of `cell` into .previous/ (never deleted, not summarized), as
    CELL.STATE-TIMESTAMP; returns where it went."""
    previous = directory / PREVIOUS_DIR
    previous.mkdir(exist_ok=True)
    stem = f"{cell.run_dir}.{state or UNKNOWN}-{rundir.now_iso().replace(':', '')}"
    target = previous / stem
    number = 1
    while target.exists():
        number += 1
        target = previous / f"{stem}-{number}"
    os.replace(cell_dir(directory, cell), target)
    return target


@contextlib.contextmanager
def locked(directory: Path) -> Iterator[None]:
    """Hold the sweep directory's lock (its .lock file, zerolab.contracts.holding: removed again when
    the sweep ends); UserError naming the sweep that holds it. A directory this creates (and the
    parents it needed) is removed again when what runs under the lock raises before writing into it."""
    with folders_made(directory):
        try:
            with holding(directory / LOCK_FILE, f"zerolab sweep {directory.name}"):
                yield
        except LockHeld as held:
            raise UserError(
                f"another zerolab sweep is running in {directory} ({held.holder}); wait for it, or stop "
                "it (Ctrl-C in its terminal)"
            ) from None


def previous_prefix(directory: Path, cell: PlannedCell) -> str:
    """Where a job moves an earlier attempt of `cell` before it runs the cell again: this path
    followed by the job's ids (`zerolab sweep --slurm`)."""
    return str(directory / PREVIOUS_DIR / f"{cell.run_dir}.before-slurm-")
