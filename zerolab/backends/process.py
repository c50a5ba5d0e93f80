"""The training command run as its own process group: its combined output streamed to the
terminal and to train.log, resources sampled, a stop asked for (Ctrl-C, SIGTERM: zerolab.backends.
driver) passed on to every rank, and nothing left running afterwards."""

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


class Training:
    """The training command as its own process group: started (`start`), its output streamed and
    its resources sampled, stopped when asked (`stop`), followed to its end (`wait`)."""

    def __init__(
        self,
        argv: list[str],
        env: dict[str, str],
        cwd: Path,
        run_dir: Path,
        *,
        echo: Callable[[str], None] | None = None,
        sample_interval_s: float = 1.0,
    ) -> None:
        self.argv, self.env, self.cwd, self.run_dir = argv, env, cwd, run_dir
        self.echo = echo or _to_stdout
        self.sample_interval_s = sample_interval_s
        self.stopped_by: int | None = None
        """The signal that asked for the stop, if one did."""

    def start(self) -> Self:
        """Start the command, its output going to train.log and the terminal, samples.csv sampled."""
        self._log = (self.run_dir / LOG_FILE).open("w", buffering=1, errors="replace")
        try:
            self.process = subprocess.Popen(
                self.argv,
                env=self.env,
                cwd=self.cwd,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: signals reach every rank, and only them
            )
        except BaseException:
            self._log.close()
            raise
        self._sampler = Sampler(
            self.run_dir / SAMPLES_FILE, self.process.pid, interval_s=self.sample_interval_s
        ).start()
        self._reader = threading.Thread(target=self._pump, name="zerolab-log", daemon=True)
        self._reader.start()
        return self

    def stop(self, number: int) -> None:
        """Asked by signal `number` (SIGINT, SIGTERM): SIGTERM to every rank, SIGKILL to what is
        left GRACE_S later; asked again, SIGKILL at once."""
        if self.stopped_by is not None:  # a second Ctrl-C: no more waiting
            _signal_group(self.process.pid, signal.SIGKILL)
            return
        self.stopped_by = number
        print(
            f"\nzerolab: {_SIGNAL_NAMES[number]}: stopping every rank (what they print from here on goes "
            f"to {LOG_FILE} only)",
            file=sys.stderr,
            flush=True,
        )
        _signal_group(self.process.pid, signal.SIGTERM)
        timer = threading.Timer(GRACE_S, _signal_group, args=(self.process.pid, signal.SIGKILL))
        timer.daemon = True
        timer.start()

    def wait(self) -> Outcome:
        """Wait for the command's end, then stop whatever it left running; its Outcome. The exit
        code is the command's own, or 128 + the signal number when a signal stopped it."""
        exit_code = self.process.wait()
        self._sampler.stop()
        _stop_leftovers(self.process.pid, list(self._sampler.seen.values()))
        self._reader.join(timeout=10)
        self._log.close()
        if self.stopped_by is not None:
            return Outcome(128 + self.stopped_by, _SIGNAL_NAMES[self.stopped_by])
        return Outcome(exit_code, None)

    def _pump(self) -> None:
        """Copy the command's output, line by line, to train.log and, until it is asked to stop,
        the terminal (the launchers answer SIGTERM with tracebacks of their own stopping)."""
        assert self.process.stdout is not None
        for raw in iter(self.process.stdout.readline, b""):
            line = raw.decode("utf-8", errors="replace")
            self._log.write(line)
            if self.stopped_by is None:
                self.echo(line)


def _to_stdout(line: str) -> None:
    sys.stdout.write(line)
    sys.stdout.flush()


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
