"""Run a training command in a prepared run directory and record how it went in status.json."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from zerolab.launch.process import Outcome, run_training
from zerolab.launch.status import (
    COMPLETED,
    FAILED,
    KILLED,
    RUNNING,
    failure_cause,
    now_iso,
    rank_signal,
    write_status,
)
from zerolab.signals import killed_by


def execute(
    run_dir: Path,
    argv: list[str],
    env: dict[str, str],
    cwd: Path,
    *,
    echo: Callable[[str], None] | None = None,
    sample_interval_s: float = 1.0,
) -> dict:
    """Run `argv` with status.json `running` meanwhile, then `completed`, `failed` (with the
    cause) or `killed`; returns the final status. Its `exit_code` is the command's."""
    started = now_iso()
    write_status(run_dir, RUNNING, started=started)
    outcome: Outcome = run_training(argv, env, cwd, run_dir, echo=echo, sample_interval_s=sample_interval_s)
    last_lines: list[str] = []
    if outcome.stopped_by:
        state, cause = KILLED, f"stopped by {outcome.stopped_by}"
    elif outcome.exit_code == 0:
        state, cause = COMPLETED, None
    else:
        state = FAILED
        cause, last_lines = _failure(outcome, Path(argv[0]).name)
    return write_status(
        run_dir,
        state,
        started=started,
        exit_code=outcome.exit_code,
        ended=now_iso(),
        cause=cause,
        last_lines=last_lines,
    )


def _failure(outcome: Outcome, launcher: str) -> tuple[str, list[str]]:
    """Why the command failed, and the output lines before it when a rank was killed by a signal:
    a rank's death by a signal first (the other ranks' errors follow from it), then the first
    error a rank printed, then the launcher's own death or exit code."""
    killed_rank = rank_signal(outcome.tail)
    if killed_rank is not None:
        return killed_rank.describe(), list(killed_rank.last_lines)
    cause = failure_cause(outcome.tail) or failure_cause(outcome.head)
    if cause:
        return cause, []
    if outcome.exit_code < 0:
        return f"the launcher ({launcher}) was {killed_by(-outcome.exit_code)}", []
    return f"the training command exited with code {outcome.exit_code}", []
