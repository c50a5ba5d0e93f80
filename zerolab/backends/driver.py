"""Running a planned launch through its backend: write the job, submit it, follow it to its end;
Ctrl-C or SIGTERM on the way cancels it (the backend's `cancel`), and following goes on until
the job has ended. The one place a launch's signals are handled."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Self, TypeVar

from zerolab.backends.base import LaunchPlan, print_now
from zerolab.rundir import Status

Submitted = TypeVar("Submitted")
Result = TypeVar("Result")


def run(plan: LaunchPlan, *, echo: Callable[[str], None] = print_now) -> tuple[Path, Status]:
    """Write `plan`'s job, submit it and follow it to its end (a signal cancels it); returns the
    run directory and its final status."""
    backend = plan.backend
    written = backend.write(plan, echo=echo)
    return run_job(
        lambda: backend.submit(written, echo=echo),
        lambda submitted: backend.follow(submitted, echo=echo),
        backend.cancel,
    )


def run_job(
    submit: Callable[[], Submitted],
    follow: Callable[[Submitted], Result],
    cancel: Callable[[Submitted, int], None],
) -> Result:
    """`submit()`, then `follow(submitted)` to the end. SIGINT or SIGTERM meanwhile calls
    `cancel(submitted, signal_number)` (one that comes while submitting, as soon as the job is
    submitted) and following goes on; the signals' own handlers come back at the end."""
    with _Cancelling() as cancelling:
        submitted = submit()
        cancelling.watch(lambda number: cancel(submitted, number))
        return follow(submitted)


class _Cancelling:
    """While entered (in the main thread): SIGINT and SIGTERM go to the watched job's cancel, or
    wait for it to be watched."""

    def __enter__(self) -> Self:
        self._cancel: Callable[[int], None] | None = None
        self._pending: list[int] = []
        self._previous: dict[int, object] = {}
        if threading.current_thread() is threading.main_thread():
            for number in (signal.SIGINT, signal.SIGTERM):
                self._previous[number] = signal.signal(number, lambda number, frame: self._caught(number))
        return self

    def __exit__(self, *exc: object) -> None:
        for number, handler in self._previous.items():
            signal.signal(number, handler)

    def watch(self, cancel: Callable[[int], None]) -> None:
        """Cancel through `cancel` from now on; at once for a signal that came before."""
        self._cancel = cancel
        for number in self._pending:
            cancel(number)

    def _caught(self, number: int) -> None:
        if self._cancel is None:
            self._pending.append(number)
        else:
            self._cancel(number)
