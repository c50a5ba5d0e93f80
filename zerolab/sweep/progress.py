"""A sweep's terminal: a progress bar over its checks (on stderr; off a terminal, a line every
CHECK_REPORT_S seconds), a rich progress bar over the cells it runs, the running cell's iteration
and loss beside it, and one line per finished cell (name, state, seconds, cause). Every rank's
output goes to the cell's train.log, not the terminal."""

from __future__ import annotations

import sys
import time
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
)

from zerolab import rundir
from zerolab.locations import display_path
from zerolab.logs.megatron import find_iteration, parse_iteration

_STATE_STYLE = {rundir.COMPLETED: "green", rundir.REFUSED: "yellow"}

CHECK_REPORT_S = 10.0
"""Off a terminal, the checks' progress is a line this often (a terminal gets a bar)."""


class CheckProgress:
    """The progress of a sweep's checks on stderr, over `total` cells: a transient bar on a terminal,
    else a line every CHECK_REPORT_S seconds (none for checks done sooner); use as a context manager,
    calling `checked` after each cell."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.done = 0
        self.started = self.reported = time.monotonic()
        self.console = Console(stderr=True, highlight=False)
        self.bar: Progress | None = None
        if self.console.is_terminal:
            self.bar = Progress(
                SpinnerColumn(),
                TextColumn("checking cells"),
                BarColumn(bar_width=24),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                console=self.console,
                transient=True,
            )
            self.task = self.bar.add_task("", total=total)

    def __enter__(self) -> CheckProgress:
        if self.bar is not None:
            self.bar.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.stop()

    def checked(self, _: Any = None) -> None:
        """One more cell checked."""
        self.done += 1
        if self.bar is not None:
            self.bar.advance(self.task)
            return
        now = time.monotonic()
        if now - self.reported >= CHECK_REPORT_S:
            self.reported = now
            print(
                f"zerolab sweep: checked {self.done:,} of {self.total:,} cells ({now - self.started:.0f} s)",
                file=sys.stderr,
                flush=True,
            )


def finished_line(name: str, status: rundir.Status, seconds: float | None, run_dir: Any = None) -> str:
    """One line for a finished (or refused) cell, `NAME  STATE  N s: CAUSE -> RUN_DIR`, in rich
    markup (the state coloured)."""

    style = _STATE_STYLE.get(status.state, "red")
    took = f"  {seconds:.0f} s" if seconds is not None else ""
    cause = f": {status.cause}" if status.cause else ""
    where = f" -> {display_path(run_dir)}" if run_dir is not None and status.state != rundir.REFUSED else ""
    return f"{escape(name)}  [{style}]{status.state}[/]{took}{escape(cause + where)}"


class SweepProgress:
    """The progress bar over `total` cells; use as a context manager."""

    def __init__(self, console: Any, total: int) -> None:

        self.console = console
        self.progress = Progress(
            SpinnerColumn(),
            BarColumn(bar_width=24),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("{task.description}"),
            console=console,
            transient=True,
            disable=not console.is_terminal,  # off a terminal it would only leave blank lines
        )
        self.task = self.progress.add_task("", total=total)
        self.label = ""

    def __enter__(self) -> SweepProgress:
        self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.stop()

    def start(self, name: str) -> None:
        """A cell starts."""
        self.label = name
        self.progress.update(self.task, description=f"{name}: starting")

    def echo(self, text: str) -> None:
        """A line of the running cell's output: its iteration and loss (read as summarize reads
        them) go into the description."""
        match = find_iteration(text)
        record = parse_iteration(text, match) if match else None
        if record is not None and record.loss is not None:
            self.progress.update(
                self.task,
                description=f"{self.label}: iteration {record.iteration}/{record.train_iters}, "
                f"lm loss {record.loss:.3f}",
            )

    def done(self, line: str) -> None:
        """A cell finished: its line above the bar, and the bar one further."""
        self.progress.console.print(line, soft_wrap=True)
        self.progress.advance(self.task)
