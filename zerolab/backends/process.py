"""Run the training command as its own process group: its combined output streamed to the
terminal and to train.log, resources sampled, Ctrl-C and SIGTERM passed on to every rank,
and nothing left running afterwards."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Self

import psutil

from zerolab.backends.sampler import Sampler
from zerolab.rundir import LOG_FILE, SAMPLES_FILE

GRACE_S = 15.0
"""How long the ranks get to exit after SIGTERM before they are killed."""

_SIGNAL_NAMES = {signal.SIGINT: "SIGINT (Ctrl-C)", signal.SIGTERM: "SIGTERM"}


@dataclass(frozen=True)
class Outcome:
    """How the training command ended: its exit code, and the signal that stopped it (if we were
    asked to stop it)."""

    exit_code: int
    stopped_by: str | None


def run_training(
    argv: list[str],
    env: dict[str, str],
    cwd: Path,
    run_dir: Path,
    *,
    echo: Callable[[str], None] | None = None,
    sample_interval_s: float = 1.0,
) -> Outcome:
    """Run `argv` to the end; returns its Outcome. The exit code is the command's own, or
    128 + the signal number when it was stopped by SIGINT/SIGTERM sent to us."""
    echo = echo or _to_stdout
    stopper = _Stopper()
    with (run_dir / LOG_FILE).open("w", buffering=1, errors="replace") as log, stopper:
        # the stopper is in place before the ranks start: a Ctrl-C at any moment reaches them
        process = subprocess.Popen(
            argv,
            env=env,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: signals reach every rank, and only them
        )
        stopper.watch(process)
        sampler = Sampler(run_dir / SAMPLES_FILE, process.pid, interval_s=sample_interval_s).start()
        reader = threading.Thread(
            target=_pump, args=(process, log, echo, stopper), name="zerolab-log", daemon=True
        )
        reader.start()
        exit_code = process.wait()
        sampler.stop()
        _stop_leftovers(process.pid, list(sampler.seen.values()))
        reader.join(timeout=10)
    if stopper.signal_number is not None:
        exit_code = 128 + stopper.signal_number
    return Outcome(
        exit_code=exit_code,
        stopped_by=_SIGNAL_NAMES.get(stopper.signal_number) if stopper.signal_number else None,
    )


def _to_stdout(line: str) -> None:
    sys.stdout.write(line)
    sys.stdout.flush()


def _pump(process: subprocess.Popen, log, echo, stopper: _Stopper) -> None:
    """Copy the command's output, line by line, to train.log and, until we are asked to stop it,
    the terminal (the launchers answer SIGTERM with tracebacks of their own stopping)."""
    assert process.stdout is not None
    for raw in iter(process.stdout.readline, b""):
        line = raw.decode("utf-8", errors="replace")
        log.write(line)
        if stopper.signal_number is None:
            echo(line)


class SignalCatcher:
    """While entered (in the main thread): SIGINT and SIGTERM go to `caught(number)` instead of
    their handlers, which come back on exit."""

    def __enter__(self) -> Self:
        self._previous: dict[int, object] = {}
        if threading.current_thread() is threading.main_thread():
            for number in (signal.SIGINT, signal.SIGTERM):
                self._previous[number] = signal.signal(number, lambda number, frame: self.caught(number))
        return self

    def __exit__(self, *exc: object) -> None:
        for number, handler in self._previous.items():
            signal.signal(number, handler)

    def caught(self, number: int) -> None:
        """What a caught signal does."""
        raise NotImplementedError


class _Stopper(SignalCatcher):
    """While installed: SIGINT/SIGTERM to us -> SIGTERM to the watched training's process group,
    then SIGKILL after GRACE_S if anything is still running. A signal that comes before the
    training is watched is passed on as soon as it is."""

    def __init__(self) -> None:
        self.process: subprocess.Popen | None = None
        self.signal_number: int | None = None

    def watch(self, process: subprocess.Popen) -> None:
        """Stop `process`'s group on a signal; at once if one has come already."""
        self.process = process
        if self.signal_number is not None:
            self._stop()

    def caught(self, number: int) -> None:
        if self.signal_number is None:
            self.signal_number = number
            print(
                f"\nzerolab: {_SIGNAL_NAMES[number]}: stopping every rank (what they print from here on goes "
                f"to {LOG_FILE} only)",
                file=sys.stderr,
                flush=True,
            )
            if self.process is not None:
                self._stop()
        elif self.process is not None:  # a second Ctrl-C: no more waiting
            _signal_group(self.process.pid, signal.SIGKILL)

    def _stop(self) -> None:
        assert self.process is not None
        _signal_group(self.process.pid, signal.SIGTERM)
        timer = threading.Timer(GRACE_S, _signal_group, args=(self.process.pid, signal.SIGKILL))
        timer.daemon = True
        timer.start()


def _signal_group(pgid: int, number: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, number)


def _stop_leftovers(pgid: int, seen: list[psutil.Process]) -> None:
    """After the launcher exits: stop what is left of its group and of every process the sampler
    saw below it (a rank that started its own session, a data-loader worker)."""
    _signal_group(pgid, signal.SIGTERM)
    alive = [process for process in seen if _running(process)]
    for process in alive:
        try:
            process.terminate()
        except psutil.NoSuchProcess:
            continue
    _, still = psutil.wait_procs(alive, timeout=5)
    for process in still:
        try:
            process.kill()
        except psutil.NoSuchProcess:
            continue
    _signal_group(pgid, signal.SIGKILL)


def _running(process: psutil.Process) -> bool:
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
