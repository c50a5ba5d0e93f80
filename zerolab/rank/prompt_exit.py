"""Ending an engine-side process as soon as its work is done. Python's own teardown after torch,
DeepSpeed and transformers are imported (every module's objects freed one by one) takes about
1.2 s per process on a 2-core machine, while its launcher (torchrun, zerolab) waits: every rank of
every launch, every export and scoring script. Nothing a run keeps is written then; what a normal
exit does that matters is done here before the process ends."""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
import threading
from typing import NoReturn


def exit_now(code: int = 0) -> NoReturn:
    """End this process with exit status `code` after what a normal exit does that a run relies
    on: the other non-daemon threads joined, the atexit functions run (wandb's finish, DeepSpeed's
    and torch's own), stdout and stderr flushed; the interpreter is not torn down."""
    # The interpreter's own first step at exit: the threads' exit hooks (a thread pool's, such as
    # torch.compile's, tells its idle workers to end), then every non-daemon thread joined; joining
    # before those hooks waited forever on the pool's workers.
    threading._shutdown()  # type: ignore[attr-defined]
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


def exit_as(stop: SystemExit) -> NoReturn:
    """End this process as the interpreter would end it for `stop` (sys.exit's argument: None is
    status 0, a number that status, anything else printed to stderr and status 1), by exit_now."""
    if stop.code is None or isinstance(stop.code, int):
        exit_now(stop.code or 0)
    print(stop.code, file=sys.stderr)
    exit_now(1)
