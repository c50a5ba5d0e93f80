"""Helpers for the summarize tests: run directories built from the real logs in fixtures/logs."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from zerolab.sweep.plan import Plan, PlannedCell, PlannedKey, write_plan

LOGS = Path(__file__).resolve().parent / "fixtures" / "logs"
CPU = LOGS / "cpu-engine"
REAL = LOGS / "real"


def make_run_dir(
    root: Path,
    name: str,
    log: Path | str,
    *,
    stamp: str = "20260101-000000",
    state: str | None = None,
    run: dict | None = None,
) -> Path:
    """`root/name/stamp/` holding `log` (a path, or a cpu-engine log's stem) as train.log, a run.json
    naming the run (plus `run`), and a status.json with `state` when given."""
    directory = root / name / stamp
    directory.mkdir(parents=True)
    source = log if isinstance(log, Path) else CPU / f"{log}.log"
    shutil.copy(source, directory / "train.log")
    (directory / "run.json").write_text(json.dumps({"name": name} | (run or {})))
    if state is not None:
        (directory / "status.json").write_text(json.dumps({"state": state, "exit_code": 0}))
    return directory


def make_sweep(root: Path, name: str, cells: list[tuple[dict, str, str]]) -> Path:
    """`root/name/`, a sweep directory as `zerolab sweep` leaves it: sweep.json, and for each cell
    ({key: value}, a cpu-engine log's stem, status.json's state) its run directory, named as zerolab
    names cells (`zero-z0_train.micro_batch_size-1`), holding that log as train.log."""
    keys = list(dict.fromkeys(key for values, _, _ in cells for key in values))
    swept = [
        PlannedKey(key=key, values=list(dict.fromkeys(values[key] for values, _, _ in cells))) for key in keys
    ]
    planned = []
    for values, log, state in cells:
        cell = "_".join(f"{key}-{value}" for key, value in values.items())
        overrides = [f"{key}={value}" for key, value in values.items()]
        planned.append(PlannedCell(name=cell, overrides=overrides, values=values, run_dir=cell))
        make_run_dir(root / name, cell, log, stamp=".", state=state, run={"model": "gpt2-tiny"})
    directory = root / name
    plan = Plan(name=name, recipe="recipes/cpu/tiny_dp.yaml", words=[], swept=swept, fixed=[], cells=planned)
    write_plan(directory, plan)
    return directory
