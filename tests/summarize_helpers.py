"""Helpers for the summarize tests: run directories built from the real logs in fixtures/logs."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

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
