"""Run a training command in a prepared run directory and record how it went in status.json."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from zerolab.launch.process import Outcome, run_training
from zerolab.launch.status import COMPLETED, FAILED, KILLED, RUNNING, failure_cause, now_iso, write_status


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
    if outcome.stopped_by:
        state, cause = KILLED, f"stopped by {outcome.stopped_by}"
    elif outcome.exit_code == 0:
        state, cause = COMPLETED, None
    else:
        state = FAILED
        cause = (
            failure_cause(outcome.tail)
            or failure_cause(outcome.head)
            or f"the training command exited with code {outcome.exit_code}"
        )
    return write_status(
        run_dir, state, started=started, exit_code=outcome.exit_code, ended=now_iso(), cause=cause
    )
