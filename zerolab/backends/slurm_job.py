"""`zerolab launch RECIPE --slurm`: submit the recipe's sbatch script (the one `zerolab render
--slurm` prints) with `sbatch`, follow the job until SLURM ends it (printing its state changes
and the run's train.log as it grows) and record how it ended in the job's status.json, with the
cause `zerolab launch` gives a local run: the job script writes its state and exit code; what it
cannot know (which rank died, on which node, by which signal; a node SLURM lost, which kills the
script itself) is read here from train.log and from SLURM. Ctrl-C cancels the job."""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from zerolab import rundir
from zerolab.backends.execute import failure_cause
from zerolab.errors import UserError
from zerolab.locations import display_path
from zerolab.logs.failures import read_ending
from zerolab.rundir import COMPLETED, FAILED, KILLED, Status, now_iso

ENDED = {
    "COMPLETED",
    "FAILED",
    "CANCELLED",
    "TIMEOUT",
    "NODE_FAIL",
    "PREEMPTED",
    "BOOT_FAIL",
    "DEADLINE",
    "OUT_OF_MEMORY",
}
"""SLURM's job states after which the job does not run again (a requeued job goes back to PENDING)."""
LOST_NODE_STATES = ("DOWN", "FAIL", "NOT_RESPONDING", "DRAIN")
"""Node states (or parts of one, `DOWN*`, `IDLE+DRAIN`) of a node SLURM has lost."""
POLL_S = 1.0


@dataclass(frozen=True)
class JobState:
    """What `scontrol show job` says of a job: its state, nodes, reason and exit code:signal."""

    state: str
    nodes: str
    reason: str
    exit_code: int
    signal: int

    @classmethod
    def parse(cls, text: str) -> JobState:
        fields = dict(re.findall(r"(\w+)=(\S*)", text))
        code, _, number = fields.get("ExitCode", "0:0").partition(":")
        return cls(
            state=fields.get("JobState", "UNKNOWN"),
            nodes=fields.get("NodeList", ""),
            reason=fields.get("Reason", "None"),
            exit_code=int(code or 0),
            signal=int(number or 0),
        )


@dataclass
class SlurmRun:
    """A submitted job: its id, run directory and submission time; the signal that cancelled it."""

    job: str
    name: str
    directory: Path
    started: str
    stopped_by: str | None = None


def submit(script: str, name: str, *, echo: Callable[[str], None]) -> SlurmRun:
    """Submit `script` (an sbatch script writing logs/NAME/slurm-JOBID) from this directory; the
    job's run directory gets the script."""
    sbatch = shutil.which("sbatch")
    if sbatch is None:
        raise UserError(
            "--slurm: sbatch is not on PATH; run on a SLURM login node, or write the script with "
            "`zerolab render --slurm` and submit it there"
        )
    submitted = subprocess.run(
        [sbatch, "--parsable"], input=script, capture_output=True, text=True, check=False
    )
    if submitted.returncode != 0:
        raise UserError(f"sbatch refused the job: {submitted.stderr.strip() or submitted.stdout.strip()}")
    job = submitted.stdout.strip().split(";")[0]
    directory = Path("logs") / name / f"slurm-{job}"
    directory.mkdir(parents=True, exist_ok=True)
    rundir.write_job_script(directory, script)
    echo(f"zerolab: submitted {name} as SLURM job {job}; run directory {display_path(directory)}\n")
    return SlurmRun(job, name, directory, now_iso())


def follow(run: SlurmRun, *, echo: Callable[[str], None], poll_s: float = POLL_S) -> tuple[Path, Status]:
    """Follow the job until SLURM ends it; its run directory and final status (also in status.json)."""
    ended = _follow(run.job, run.directory, echo, poll_s)
    return run.directory, _record(run.directory, run.job, ended, run.started, run.stopped_by)


def cancel(run: SlurmRun, number: int) -> None:
    """scancel the job, once; `follow` goes on until SLURM has ended it."""
    if run.stopped_by is None:
        run.stopped_by = signal.Signals(number).name
        subprocess.run(["scancel", run.job], capture_output=True, check=False)


def _follow(job: str, directory: Path, echo: Callable[[str], None], poll_s: float) -> JobState:
    """Poll the job until SLURM ends it, echoing its state changes and train.log's new lines."""
    seen_state = ""
    log = _Tail(directory / rundir.LOG_FILE)
    while True:
        state = _show(job)
        log.echo(echo)
        if state is None:  # SLURM has forgotten the job (MinJobAge): it ended
            return JobState("ENDED", "", "None", 0, 0)
        if state.state != seen_state:
            where = f" on {state.nodes}" if state.nodes and state.nodes != "(null)" else ""
            echo(f"zerolab: job {job} {state.state.lower()}{where}\n")
            seen_state = state.state
        if state.state in ENDED:
            log.echo(echo)
            return state
        time.sleep(poll_s)


def _show(job: str) -> JobState | None:
    shown = subprocess.run(
        ["scontrol", "show", "job", "--oneliner", job], capture_output=True, text=True, check=False
    )
    if shown.returncode != 0:
        if "Invalid job id" in shown.stderr:
            return None
        raise UserError(f"scontrol show job {job}: {shown.stderr.strip()}")
    return JobState.parse(shown.stdout)


def _record(directory: Path, job: str, ended: JobState, started: str, stopped_by: str | None) -> Status:
    """The job's final status.json: the script's own, with the cause added; or, when SLURM ended
    the script before it could write one (a lost node, a time limit, a cancel), SLURM's account."""
    written, _ = rundir.read_status(directory)
    if stopped_by is not None:
        cause = f"stopped by {stopped_by}: SLURM job {job} cancelled"
        return rundir.write_status(directory, _ended(written, started, KILLED, ended, cause, []))
    if written is not None and written.state == COMPLETED and ended.state in ("COMPLETED", "ENDED"):
        return written
    lost = _lost_nodes(ended.nodes)
    if written is not None and written.state == FAILED and not lost:
        cause, last_lines = failure_cause(directory, written.exit_code or 1, "srun")
        return rundir.write_status(
            directory, written.model_copy(update={"cause": cause, "last_lines": last_lines})
        )
    cause = f"SLURM ended job {job} as {ended.state} (reason {ended.reason})"
    if lost:
        cause = f"SLURM lost node {', '.join(lost)}: {cause}"
    killed = read_ending(directory / rundir.LOG_FILE).signals.found
    last_lines: list[str] = []
    if killed is not None:
        cause, last_lines = f"{cause}; {killed.describe()}", list(killed.last_lines)
    return rundir.write_status(directory, _ended(written, started, FAILED, ended, cause, last_lines))


def _ended(
    written: Status | None, started: str, state: str, ended: JobState, cause: str, last: list[str]
) -> Status:
    exit_code = written.exit_code if written is not None and written.exit_code else ended.exit_code
    if not exit_code and ended.signal:
        exit_code = 128 + ended.signal
    return Status(
        state=state,
        started=written.started if written is not None and written.started else started,
        exit_code=exit_code or 1,
        ended=now_iso(),
        cause=cause,
        last_lines=last,
    )


def _lost_nodes(nodelist: str) -> list[str]:
    """The job's nodes that SLURM now has down, failed or not responding, with their state."""
    if not nodelist or nodelist == "(null)":
        return []
    shown = subprocess.run(
        ["sinfo", "--noheader", "--Node", "--nodes", nodelist, "--format=%N %T"],
        capture_output=True,
        text=True,
        check=False,
    )
    states = dict(line.split(maxsplit=1) for line in shown.stdout.splitlines() if line.strip())
    return [
        f"{node} ({state.lower()})"
        for node, state in states.items()
        if any(mark in state.upper() for mark in LOST_NODE_STATES) or state.endswith("*")
    ]


class _Tail:
    """Echoes the lines a growing file gains (the job's train.log)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self.partial = b""

    def echo(self, echo: Callable[[str], None]) -> None:
        if not self.path.is_file():
            return
        with self.path.open("rb") as handle:
            handle.seek(self.offset)
            data = handle.read()
        self.offset += len(data)
        lines = (self.partial + data).split(b"\n")
        self.partial = lines.pop()
        for line in lines:
            echo(line.decode(errors="replace") + "\n")
