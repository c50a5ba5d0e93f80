"""A launch's process management on a stand-in training command: streamed log, status.json,
exit codes, the cause of a crash, signals, and no process left behind."""

from __future__ import annotations

import csv
import itertools
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from launch_helpers import standin, still_running

from zerolab.backends.driver import run_job
from zerolab.backends.execute import Execution, finish, start
from zerolab.logs.failures import read_ending

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
SIGKILL_WORDS = (
    "killed by SIGKILL (signal 9): likely out of host memory (the OOM killer) or a scheduler's limit"
)
"""How a death by SIGKILL is said (zerolab.logs.signals.killed_by)."""


def run(tmp_path: Path, *options: str) -> tuple[dict, Path]:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    lines: list[str] = []
    argv = standin(tmp_path / "pids", *options)
    status = run_job(
        lambda: start(run_dir, argv, dict(os.environ), tmp_path, echo=lines.append), finish, Execution.stop
    )
    assert "".join(lines) == (run_dir / "train.log").read_text(), "the terminal and train.log differ"
    return status, run_dir


def test_completed_run_streams_every_rank_and_leaves_nothing_running(tmp_path):
    status, run_dir = run(tmp_path, "--iters", "4")
    assert status.state == "completed"
    assert status.exit_code == 0
    assert status.cause is None
    assert status.started <= status.ended
    assert json.loads((run_dir / "status.json").read_text()) == status.model_dump()
    log = (run_dir / "train.log").read_text()
    assert sum(line.startswith(" iteration ") for line in log.splitlines()) == 4
    assert "helper of rank 0" in log and "helper of rank 1" in log
    assert still_running(tmp_path / "pids") == []


@pytest.mark.parametrize(
    ("code", "cause"),
    [
        (3, "the training command exited with code 3"),
        (137, f"the training command exited with code 137: {SIGKILL_WORDS}"),
    ],
)
def test_exit_code_of_the_training_is_the_exit_code(tmp_path, code, cause):
    """128 plus a signal (srun's code for a task the OOM killer ended) says which signal."""
    status, _ = run(tmp_path, "--iters", "1", "--exit-code", str(code))
    assert (status.state, status.exit_code) == ("failed", code)
    assert status.cause == cause


def test_crashing_rank_fails_the_launch_with_the_rank_error_as_cause(tmp_path):
    status, _ = run(tmp_path, "--iters", "20", "--crash-rank", "1")
    assert status.state == "failed"
    assert status.exit_code == 1
    assert status.cause == "RuntimeError: stand-in rank 1 crashed at iteration 2"
    assert still_running(tmp_path / "pids") == []


def test_a_launcher_killed_by_a_signal_is_the_cause(tmp_path):
    status, _ = run(tmp_path, "--iters", "1000", "--sleep", "0.05", "--launcher-signal", str(signal.SIGKILL))
    assert (status.state, status.exit_code) == ("failed", -signal.SIGKILL)
    launcher = Path(sys.executable).name
    assert status.cause == f"the launcher ({launcher}) was {SIGKILL_WORDS}"
    assert still_running(tmp_path / "pids") == []  # its orphaned ranks and helpers were stopped too


def test_cause_of_a_real_engine_crash_is_the_first_rank_error(tmp_path):
    failure = read_ending(FIXTURES / "logs" / "cpu-engine" / "try5.log").failure
    assert failure is not None and failure.detail == (
        "AssertionError: Mismatch in local rank setting, args.local_rank=0 but env['LOCAL_RANK']=1."
    )
    fine = tmp_path / "fine.log"
    fine.write_text("all fine\n iteration 1/ 2 | lm loss: 1.0 |\n")
    assert read_ending(fine).failure is None


LAUNCH_IN_CHILD = """
import os, sys
from pathlib import Path
from zerolab.backends.driver import run_job
from zerolab.backends.execute import Execution, finish, start
launch = lambda: start(Path(sys.argv[1]), sys.argv[2:], dict(os.environ), Path.cwd())
status = run_job(launch, finish, Execution.stop)
sys.exit(status.exit_code)
"""


@pytest.mark.parametrize(("signal_number", "name"), [(signal.SIGTERM, "SIGTERM"), (signal.SIGINT, "SIGINT")])
def test_signal_stops_every_rank_and_records_killed(tmp_path, signal_number, name):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    argv = standin(tmp_path / "pids", "--iters", "1000", "--sleep", "0.05")
    launch = subprocess.Popen(
        [sys.executable, "-c", LAUNCH_IN_CHILD, str(run_dir), *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    log = run_dir / "train.log"
    deadline = time.monotonic() + 30
    while not (log.is_file() and log.read_text().count("\n iteration ") >= 3):
        assert time.monotonic() < deadline, "the stand-in never started"
        time.sleep(0.1)
    assert len(list((tmp_path / "pids").glob("*.pid"))) == 5  # launcher, 2 ranks, 2 helpers
    launch.send_signal(signal_number)
    terminal, _ = launch.communicate(timeout=30)
    assert launch.returncode == 128 + signal_number
    status = json.loads((run_dir / "status.json").read_text())
    assert status["state"] == "killed"
    assert status["exit_code"] == 128 + signal_number
    assert name in status["cause"]
    assert still_running(tmp_path / "pids") == []
    assert "SignalException" in log.read_text()  # the launcher's own stopping: in train.log,
    assert "SignalException" not in terminal and "Traceback" not in terminal  # not on the terminal
    assert "stopping every rank (what they print from here on goes to train.log only)" in terminal


CTRL_C_AS_THE_RANKS_START = """
import os, signal, subprocess, sys
from pathlib import Path
from zerolab.backends.driver import run_job
from zerolab.backends import execute

start = subprocess.Popen
def start_then_ctrl_c(*args, **kwargs):
    subprocess.Popen = start
    process = start(*args, **kwargs)
    os.kill(os.getpid(), signal.SIGINT)  # the launcher is running, nothing is watching it yet
    return process
subprocess.Popen = start_then_ctrl_c
launch = lambda: execute.start(Path(sys.argv[1]), sys.argv[2:], dict(os.environ), Path.cwd())
status = run_job(launch, execute.finish, execute.Execution.stop)
sys.exit(status.exit_code)
"""


def test_ctrl_c_the_moment_the_ranks_start_stops_them(tmp_path):
    # a Ctrl-C between the launcher's start and the stopper's install left the ranks running in
    # their own session, out of the terminal's reach
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    argv = standin(tmp_path / "pids", "--iters", "1000", "--sleep", "0.05")
    launch = subprocess.run(
        [sys.executable, "-c", CTRL_C_AS_THE_RANKS_START, str(run_dir), *argv],
        stdout=subprocess.DEVNULL,
        timeout=60,
        check=False,
    )
    assert launch.returncode == 128 + signal.SIGINT
    status = json.loads((run_dir / "status.json").read_text())
    assert (status["state"], status["exit_code"]) == ("killed", 128 + signal.SIGINT)
    assert still_running(tmp_path / "pids") == []


def test_samples_measure_the_resident_memory_of_the_whole_tree(tmp_path):
    # Two ranks whose helpers (grandchildren of the launcher) each hold 128 MiB.
    status, run_dir = run(tmp_path, "--iters", "25", "--sleep", "0.1", "--hold-mib", "128")
    assert status.state == "completed"
    with (run_dir / "samples.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert list(rows[0])[:3] == ["elapsed_s", "process_tree_rss_MiB", "system_used_MiB"]
    elapsed = [float(row["elapsed_s"]) for row in rows]
    assert len(rows) >= 3
    assert all(
        0.9 < later - earlier < 1.6 for earlier, later in itertools.pairwise(elapsed[:-1])
    )  # the last: at exit
    peak = max(float(row["process_tree_rss_MiB"]) for row in rows)
    assert 2 * 128 < peak < 2 * 128 + 200  # both helpers' 128 MiB plus five small interpreters
    assert all(float(row["system_used_MiB"]) > 0 for row in rows)


def test_an_exception_raised_while_handling_another_is_the_cause(tmp_path):
    """The engine tries a call, catches its TypeError and falls back; the fallback's error failed
    the run. Another rank's later errors, and an exception re-raised from its cause, do not count."""
    log = tmp_path / "train.log"
    log.write_text(
        "[rank0]: Traceback (most recent call last):\n"
        '[rank0]:   File "transformer.py", line 1336, in forward\n'
        "[rank0]: TypeError: forward() got an unexpected keyword argument 'cpu_offloading'\n"
        "[rank0]: \n"
        "[rank0]: During handling of the above exception, another exception occurred:\n"
        "[rank0]: \n"
        "[rank0]: Traceback (most recent call last):\n"
        "[rank0]: ModuleNotFoundError: No module named 'scaled_masked_softmax_cuda'\n"
        "[rank1]: Traceback (most recent call last):\n"
        "[rank1]: RuntimeError: rank 1 saw rank 0 go\n"
    )
    failure = read_ending(log).failure
    assert failure is not None
    assert failure.detail == "ModuleNotFoundError: No module named 'scaled_masked_softmax_cuda'"
    log.write_text(
        "Traceback (most recent call last):\n"
        "ValueError: the root cause\n"
        "\n"
        "The above exception was the direct cause of the following exception:\n"
        "\n"
        "Traceback (most recent call last):\n"
        "RuntimeError: a wrapper\n"
    )
    assert read_ending(log).failure.detail == "ValueError: the root cause"
