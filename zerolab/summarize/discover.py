"""Finding runs: run directories written by `zerolab launch` (docs/run-directory.md)
and plain log files, under the paths a user gives."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from zerolab import rundir
from zerolab.errors import UserError

LOG_SUFFIXES = (".log", ".out", ".err", ".txt")


@dataclass(frozen=True)
class Run:
    """One run to summarize: a run directory (`run_dir` set) or a plain log file."""

    log: Path | None
    run_dir: Path | None = None

    @property
    def path(self) -> Path:
        """The run directory, or the log file."""
        return self.run_dir or self.log  # type: ignore[return-value]


def _run_in(directory: Path) -> Run:
    log = directory / rundir.LOG_FILE
    return Run(log if log.is_file() else None, directory)


NOTHING = f"no run directory (with run.json or train.log) and no log file ({', '.join(LOG_SUFFIXES)})"
"""What a folder holding no run lacks."""


def discover(paths: list[Path], skipped: list[tuple[str, str]] | None = None) -> list[Run]:
    """Every run under `paths`, in a stable order; UserError for a path that does not exist. A
    folder given that holds no run is added to `skipped` (path, why) when there are runs elsewhere."""
    runs: list[Run] = []
    empty: list[Path] = []
    for given in paths:
        if not given.exists():
            raise UserError(
                f"{given}: no such file or directory (give run directories, log files or folders)"
            )
        if given.is_file():
            runs.append(_run_in(given.parent) if given.name in rundir.MARKERS else Run(given))
        elif rundir.is_run_dir(given):
            runs.append(_run_in(given))
        else:
            found = _walk(given)
            runs.extend(found)
            if not found:
                empty.append(given)
    unique: dict[Path, Run] = {}
    for run in runs:
        unique.setdefault(run.path.resolve(), run)
    if not unique:
        raise UserError(f"{NOTHING} under {', '.join(str(p) for p in paths)}")
    if skipped is not None:
        skipped += [(str(folder), f"{NOTHING} under it") for folder in empty]
    return list(unique.values())


def _walk(top: Path) -> list[Run]:
    found = []
    for root, dirs, files in os.walk(top, onerror=None):
        here = Path(root)
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        if here != top and rundir.is_run_dir(here):
            found.append(_run_in(here))
            dirs[:] = []
            continue
        for name in sorted(files):
            if name.endswith(LOG_SUFFIXES) and not name.startswith("."):
                found.append(Run(here / name))
    return found
