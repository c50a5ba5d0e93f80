"""Checkpoints of a run (`train.save_interval`) and the Megatron flags that resume one."""

from __future__ import annotations

from pathlib import Path

from zerolab.errors import UserError
from zerolab.launch.rundir import CHECKPOINTS_DIR

LATEST_FILE = "latest_checkpointed_iteration.txt"
"""Megatron's record of a checkpoint directory's last complete save."""

SCHEDULER_FLAGS = (
    "--train-iters",
    "--lr",
    "--min-lr",
    "--lr-warmup-iters",
    "--lr-decay-style",
    "--weight-decay",
)
"""Megatron checks these against the checkpoint's learning-rate scheduler when it resumes."""


def last_checkpoint(run_dir: Path) -> int | None:
    """The iteration of the last checkpoint saved in `run_dir`, or None when it has none."""
    latest = run_dir / CHECKPOINTS_DIR / LATEST_FILE
    try:
        return int(latest.read_text().strip())
    except (FileNotFoundError, ValueError):
        return None


def resume_args(previous_run: Path, previous_argv: list[str], argv: list[str]) -> list[str]:
    """`--load` of the previous run's checkpoints, and `--override-opt_param-scheduler` when
    the learning-rate schedule differs from the one saved (e.g. more iterations)."""
    if last_checkpoint(previous_run) is None:
        raise UserError(
            f"{previous_run}: no checkpoint to resume from ({CHECKPOINTS_DIR}/{LATEST_FILE} is missing); "
            "launch with train.save_interval=N to save checkpoints"
        )
    args = ["--load", str(previous_run / CHECKPOINTS_DIR)]
    if flag_values(previous_argv, SCHEDULER_FLAGS) != flag_values(argv, SCHEDULER_FLAGS):
        args.append("--override-opt_param-scheduler")
    return args


def flag_values(argv: list[str], flags: tuple[str, ...]) -> dict[str, str | None]:
    """The value following each of `flags` in `argv` (None when absent)."""
    return {flag: argv[argv.index(flag) + 1] if flag in argv[:-1] else None for flag in flags}
