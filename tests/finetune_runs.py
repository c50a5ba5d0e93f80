"""Fine-tuning on the real engine for a test, as a user launches it: `zerolab launch` of a shipped
CPU twin (recipes/finetune/cpu/tiny_wnli_SETUP: the shipped WNLI sample, 2 ranks over gloo) with the
model and overrides given; the run must complete, and its records come back."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from launch_helpers import shm_buffers_left

from zerolab.backends.local import free_port
from zerolab.cli import main
from zerolab.finetune.records import scan_records
from zerolab.locations import REPO_ROOT

GLUE_SAMPLES = REPO_ROOT / "data_prep" / "samples" / "glue"
"""The shipped GLUE samples (WNLI's train and validation rows) the fine-tuning tests read."""


def fine_tune(model: Path, setup: str, run_dir: Path, *overrides: str) -> list[dict[str, Any]]:
    """The records of `zerolab launch finetune/cpu/tiny_wnli_SETUP` fine-tuning `model` (a Hugging
    Face folder or a run directory) with `overrides`, into `run_dir`."""
    port = free_port()
    argv = [
        "launch",
        f"finetune/cpu/tiny_wnli_{setup}",
        f"finetune.model={model}",
        f"hardware.master_port={port}",
        *overrides,
        "--run-dir",
        str(run_dir),
    ]
    code = main(argv)
    status = json.loads((run_dir / "status.json").read_text())
    log_tail = (run_dir / "train.log").read_text(errors="replace")[-3000:]
    assert code == 0 and status["state"] == "completed", (status.get("cause"), log_tail)
    assert not shm_buffers_left(port)  # no host memory left behind
    problems: list[str] = []
    records = scan_records(run_dir, problems)
    assert not problems, problems
    return records


def failed_fine_tune(model: Path, run_dir: Path) -> tuple[dict[str, Any], str]:
    """status.json and train.log of `zerolab launch finetune/cpu/tiny_wnli_dp` fine-tuning `model`
    into `run_dir`, a run that must start and fail (on one rank: every rank reads the same files and
    fails alike, and a second would only start up)."""
    argv = [
        "launch",
        "finetune/cpu/tiny_wnli_dp",
        f"finetune.model={model}",
        f"hardware.master_port={free_port()}",
        "hardware.procs_per_node=1",
    ]
    assert main([*argv, "--run-dir", str(run_dir)]) != 0
    status = json.loads((run_dir / "status.json").read_text())
    assert status["state"] == "failed", status
    return status, (run_dir / "train.log").read_text(errors="replace")
