"""The demo's terminal: one line per run, iteration and loss as they come; every rank's full
output goes to the run's train.log."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

from zerolab.locations import display_path

_ITERATION = re.compile(r"iteration\s+(\d+)/\s*(\d+) .*?lm loss: ([0-9.E+-]+)")


class RunProgress:
    """One line per run on the terminal (iteration and loss as they come); the full output
    of every rank goes to the run's train.log."""

    def __init__(self, console: Any, label: str) -> None:
        self.console = console
        self.label = label
        self.started = time.monotonic()
        self.first_loss: float | None = None
        self.status = console.status(f"{label}: starting 2 ranks")
        self.status.start()

    def line(self, text: str) -> None:
        match = _ITERATION.search(text)
        if match:
            iteration, total, loss = int(match[1]), int(match[2]), float(match[3])
            self.first_loss = self.first_loss if self.first_loss is not None else loss
            self.status.update(f"{self.label}: iteration {iteration}/{total}, lm loss {loss:.3f}")
        elif text.startswith("zerolab: launching"):
            self.status.update(f"{self.label}: starting 2 ranks")

    def done(self, status: Any, run_dir: Path) -> None:
        self.status.stop()
        seconds = time.monotonic() - self.started
        mark = "[green]completed[/]" if status.state == "completed" else f"[red]{status.state}[/]"
        self.console.print(f"{self.label}: {mark} in {seconds:.0f} s -> {display_path(run_dir)}")
