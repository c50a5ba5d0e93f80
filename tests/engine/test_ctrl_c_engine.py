"""Ctrl-C in the newest commands, on the real engine's checks (no rank starts: each is stopped
before): `zerolab launch` and `zerolab ladder` stopped as their run directory is written remove it
and say so in one line; `zerolab sweep` stopped as it checks its cells writes nothing and says the
same command goes on. Exit status 130, no traceback. Without the engine (the lock, the GPU check):
tests/unit/test_ctrl_c_and_two_at_once.py; a checkpoint's conversion: test_resume_engine.py."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

CTRL_C_AT = """
import os, signal, sys
import zerolab.rundir, zerolab.sweep.run
from zerolab.cli import main

# Ctrl-C as a terminal delivers it, whatever this test's parents ignore (a job started in the
# background by a non-interactive shell, `make test &`, inherits SIGINT ignored)
signal.signal(signal.SIGINT, signal.default_int_handler)

def then_ctrl_c(function):
    def call(*args, **kwargs):
        result = function(*args, **kwargs)
        os.kill(os.getpid(), signal.SIGINT)  # as if typed now
        return result
    return call

if sys.argv[1] == "sweep":  # once its first cell is checked
    checker = zerolab.sweep.run._checker
    zerolab.sweep.run._checker = lambda *a, **k: then_ctrl_c(checker(*a, **k))
else:  # as the run directory is written, before any rank starts
    zerolab.rundir.write_doctor = then_ctrl_c(zerolab.rundir.write_doctor)
sys.exit(main(sys.argv[1:]))
"""


def stopped(argv: list[str], cwd: Path) -> str:
    """Run `zerolab ARGV` stopped by Ctrl-C at its point; its last line on stderr."""
    done = subprocess.run(
        [sys.executable, "-c", CTRL_C_AT, *argv], cwd=cwd, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 130, done.stderr[-3000:]
    assert "Traceback" not in done.stderr and "KeyboardInterrupt" not in done.stderr
    return done.stderr.strip().splitlines()[-1]


@pytest.mark.parametrize("command", ["launch", "ladder"])
def test_launch_and_ladder_stopped_as_the_run_directory_is_written_leave_none(
    engine, dataset, tmp_path, command
):
    run_dir = tmp_path / "logs" / "run"
    line = stopped([command, "cpu/tiny_z1", f"data.path={dataset}", "--run-dir", str(run_dir)], tmp_path)
    assert line == f"zerolab: interrupted; nothing was launched, and the run directory {run_dir} was removed"
    assert not (tmp_path / "logs").exists()


def test_a_sweep_stopped_as_it_checks_its_cells_writes_nothing(engine, dataset, tmp_path):
    line = stopped(["sweep", "cpu/tiny_z1", f"data.path={dataset}", "zero=z1,z2", "--name", "s"], tmp_path)
    assert line == (
        "zerolab: interrupted; the sweep s stopped (nothing written); run the same command again to run "
        "the unfinished cells"
    )
    assert not (tmp_path / "logs").exists()
