"""The `zerolab` command run as a user runs it: a separate Python process."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path


def run_zerolab(argv: list[str], env: dict[str, str], cwd: Path) -> tuple[subprocess.CompletedProcess, float]:
    """The `zerolab` command as a user runs it, and how long it took."""
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "zerolab", *argv],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=120,
        check=False,
    )
    return done, time.monotonic() - started
