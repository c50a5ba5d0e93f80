"""Helpers for the launch tests: the stand-in training command and process checks."""

from __future__ import annotations

import contextlib
import socket
import sys
from collections.abc import Iterator
from pathlib import Path

import psutil

STANDIN = Path(__file__).resolve().parent / "standin_training.py"
DEFAULT_PORT = 29500
"""The rendezvous port of torchrun and of the deepspeed launcher when none is given."""


def standin(pid_dir: Path, *options: str) -> list[str]:
    """argv of the stand-in training command, recording its processes' pids in `pid_dir`."""
    pid_dir.mkdir(exist_ok=True)
    return [sys.executable, str(STANDIN), "--pid-dir", str(pid_dir), *options]


def still_running(pid_dir: Path) -> list[str]:
    """The stand-in processes (pid and role) that are still alive."""
    alive = []
    for pid_file in pid_dir.glob("*.pid"):
        pid = int(pid_file.stem)
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                alive.append(f"{pid} ({pid_file.read_text()})")
        except psutil.NoSuchProcess:
            continue
    return alive


@contextlib.contextmanager
def default_port_in_use() -> Iterator[None]:
    """Port 29500 listened on, as a run that trains holds it (left as it is when something holds it
    already)."""
    with socket.socket() as other_run:
        with contextlib.suppress(OSError):
            other_run.bind(("", DEFAULT_PORT))
            other_run.listen()
        yield


def shm_buffers_left(port: int | str) -> list[Path]:
    """DeepSpeed's CPU all-reduce buffers (64 MiB a rank) in /dev/shm of the run whose rendezvous
    port is `port`: none once its ranks have mapped them (shm_buffers_unlinked)."""
    return list(Path("/dev/shm").glob(f"deepspeed_allreduce_buffer_*_{port}_*"))
