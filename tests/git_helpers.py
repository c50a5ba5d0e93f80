"""Git for tests that build local repositories (the engine checkout, the GPU check's kit sources)."""

from __future__ import annotations

import subprocess
from pathlib import Path


def git(*args: str, cwd: Path) -> str:
    """`git ARGS` in `cwd`; its output, stripped. Fails the test when git fails."""
    result = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True)
    return result.stdout.strip()
