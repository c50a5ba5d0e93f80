"""The local job: a training command run in a prepared run directory, with how it went in
status.json (running, then completed, failed with the cause, or killed)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from zerolab import rundir
from zerolab.backends.process import Training
from zerolab.logs.failures import read_ending
from zerolab.logs.signals import killed_by, signal_of_exit
from zerolab.rundir import COMPLETED, FAILED, KILLED, RUNNING, Status, now_iso


@dataclass(frozen=True)
class Execution:
    """A training command started in its run directory: what `finish` and `stop` act on."""

    run_dir: Path
    launcher: str
    """The command's program name, for a cause that blames it."""
    started: str
    training: Training

    def stop(self, number: int) -> None:
        """Stop every rank, as signal `number` asks (zerolab.backends.process.Training.stop)."""
        self.training.stop(number)


def start(
    run_dir: Path,
    argv: list[str],
    env: dict[str, str],
    cwd: Path,
    *,
    echo: Callable[[str], None] | None = None,
    sample_interval_s: float = 1.0,
) -> Execution:
    """Start `argv` in `run_dir`, status.json `running` meanwhile."""
    started = now_iso()
    rundir.write_status(run_dir, Status(state=RUNNING, started=started))
    training = Training(argv, env, cwd, run_dir, echo=echo, sample_interval_s=sample_interval_s).start()
    return Execution(run_dir, Path(argv[0]).name, started, training)


def finish(execution: Execution) -> Status:
    """Wait for the command's end and record it in status.json: `completed`, `failed` (with the
    cause) or `killed`; returns the final status, whose `exit_code` is the command's."""
    outcome = execution.training.wait()
    last_lines: list[str] = []
    if outcome.stopped_by:
        state, cause = KILLED, f"stopped by {outcome.stopped_by}"
    elif outcome.exit_code == 0:
        state, cause = COMPLETED, None
    else:
        state = FAILED
        cause, last_lines = failure_cause(execution.run_dir, outcome.exit_code, execution.launcher)
    final = Status(
        state=state,
        started=execution.started,
        exit_code=outcome.exit_code,
        ended=now_iso(),
        cause=cause,
        last_lines=last_lines,
    )
    return rundir.write_status(execution.run_dir, final)


def failure_cause(run_dir: Path, exit_code: int, launcher: str) -> tuple[str, list[str]]:
    """Why the command failed, as zerolab.logs.failures reads train.log, and the output lines before it
    when a rank was killed by a signal: a rank's death by a signal first (the other ranks' errors
    follow from it), then what the log says (an error a rank raised: its own line), then the
    launcher's own death or exit code."""
    ending = read_ending(run_dir / rundir.LOG_FILE)
    killed_rank = ending.signals.found
    if killed_rank is not None:
        return killed_rank.describe(), list(killed_rank.last_lines)
    failure = ending.failure
    if failure is not None:
        return (failure.detail if failure.kind == "exception" else failure.label), []
    if exit_code < 0:
        return f"the launcher ({launcher}) was {killed_by(-exit_code)}", []
    number = signal_of_exit(exit_code)  # 128 plus a signal: srun's, a shell's ranks killed
    killed = f": {killed_by(number)}" if number is not None else ""
    return f"the training command exited with code {exit_code}{killed}", []
