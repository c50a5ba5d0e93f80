"""Ctrl-C and two of the same command at once, without the engine: the one lock (zerolab.contracts
.holding) names its holder to a second process and lets a waiter go on after it; the GPU check
stopped by Ctrl-C stops its step's command (in a session of its own, out of the terminal's reach),
says in one line what a rerun goes on from, and a second check in the same folder is refused
naming the first; a run directory written when Ctrl-C comes is removed, and said so. On the engine
(sweep, launch, ladder, a checkpoint's conversion): tests/engine/test_ctrl_c_engine.py."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from zerolab import rundir
from zerolab.contracts import LockHeld, holding
from zerolab.errors import Interrupted, interrupted_line

HOLD = """
import sys
from pathlib import Path
from zerolab.contracts import holding
with holding(Path(sys.argv[1]), "a test's holder"):
    print("held", flush=True)
    sys.stdin.read()
"""


def test_a_lock_names_its_holder_and_a_waiter_goes_on_once_it_is_released(tmp_path):
    lock = tmp_path / ".lock"
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(lock)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert holder.stdout.readline() == "held\n"
    with pytest.raises(LockHeld) as held, holding(lock, "a second"):
        pass
    assert held.value.holder == f"pid {holder.pid}: a test's holder"
    told = []

    def waiting(who: str) -> None:
        told.append(who)
        holder.stdin.close()  # the holder ends its block

    with holding(lock, "the waiter", waiting=waiting):
        assert holder.wait(timeout=30) == 0
        assert lock.read_text() == f"pid {os.getpid()}: the waiter\n"
    assert told == [f"pid {holder.pid}: a test's holder"]
    assert not lock.exists()  # removed by whoever held it last


CHECK_THAT_SLEEPS = """
import sys
from pathlib import Path
from zerolab.gpucheck import check
from zerolab.gpucheck.__main__ import main

work, pid_file = Path(sys.argv[1]), sys.argv[2]
sleeper = [sys.executable, "-c", "import os, sys, time; open(sys.argv[1], 'w').write(str(os.getpid())); "
           "time.sleep(600)", pid_file]
made = check.Write(work / "made.sh", "#!/bin/sh\\n" * 1000, "a file", executable=True)
check.steps = lambda options: [
    check.Step("environment", "writes a file, then sleeps", 300, [made, check.Command(sleeper)]),
    check.Step("report", "nothing", 1),
]
sys.exit(main(["--rehearse", "--work", str(work), "--budget", "1000"]))
"""


def gpu_check(work: Path, pid_file: Path) -> subprocess.Popen:
    """The GPU check with one step that sleeps, started as a terminal starts a foreground job."""
    return subprocess.Popen(
        [sys.executable, "-c", CHECK_THAT_SLEEPS, str(work), str(pid_file)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip


def test_ctrl_c_stops_the_gpu_checks_step_and_a_second_check_there_is_refused(tmp_path):
    # before: a traceback, the step's command (its own session) left running, and a second check
    # in the same folder ran the same steps into it
    work, pid_file = tmp_path / "work", tmp_path / "sleeper.pid"
    first = gpu_check(work, pid_file)
    deadline = time.monotonic() + 60
    while not (pid_file.is_file() and pid_file.read_text()):
        assert first.poll() is None and time.monotonic() < deadline, first.communicate()
        time.sleep(0.05)
    sleeper = int(pid_file.read_text())

    second = gpu_check(work, tmp_path / "second.pid")
    _, err = second.communicate(timeout=60)
    assert second.returncode == 2
    assert f"another GPU check is running in {work} (pid {first.pid}: make gpu-check --rehearse)" in err
    assert not (tmp_path / "second.pid").exists()

    os.killpg(first.pid, signal.SIGINT)  # Ctrl-C: the terminal's foreground process group
    _, err = first.communicate(timeout=60)
    assert first.returncode == 130
    assert "Traceback" not in err and "KeyboardInterrupt" not in err
    assert err.strip().splitlines()[-1] == (
        "zerolab: interrupted; step 1/2 environment was stopped (it runs again from its start), the steps "
        f"done before it are recorded in {work / 'steps'}: run the same command again to go on"
    )
    with pytest.raises(ProcessLookupError):
        os.kill(sleeper, 0)  # stopped with the check
    assert not (work / "steps" / "environment.json").exists()  # not recorded as done
    assert (work / "made.sh").read_text() == "#!/bin/sh\n" * 1000
    assert sorted(path.name for path in work.iterdir()) == ["made.sh"]  # no lock, no partial file


def test_ctrl_c_as_a_run_directory_is_written_removes_it_and_says_so(tmp_path):
    path = tmp_path / "logs" / "tiny" / "stamp"
    with pytest.raises(Interrupted) as stop, rundir.made(path) as directory:
        rundir.write_recipe(directory, "half of it\n")
        raise KeyboardInterrupt
    assert interrupted_line(stop.value) == (
        f"zerolab: interrupted; nothing was launched, and the run directory {path} was removed"
    )
    assert not (tmp_path / "logs").exists()
    assert interrupted_line(KeyboardInterrupt()) == "zerolab: interrupted (Ctrl-C)"
