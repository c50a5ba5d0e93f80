"""Helpers for the launch tests: the stand-in training command and process checks."""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import psutil

STANDIN = Path(__file__).resolve().parent / "standin_training.py"


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


def free_port() -> int:
    """A TCP port free right now: a rendezvous port for an engine run that no concurrent run holds."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]
