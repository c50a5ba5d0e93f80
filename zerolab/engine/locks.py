"""The locks in requirements/, written by `make lock` (uv pip compile, from PyPI): the exact version
of every package each environment installs. pins.toml owns the engine stack's versions: engine.txt
is resolved from them, dev.txt under engine.txt, zerolab.txt under dev.txt, so a package has one
version wherever it is installed:

    dev.txt      make dev's .venv: zerolab's dependencies and its test tools, with hashes
    zerolab.txt  zerolab's dependencies alone: the GPU image and the GPU kit install these
    engine.txt   pins.toml's packages and theirs: the constraints of `make setup`'s pip (no hashes:
                 the engine's torch is the machine's own build, CPU or CUDA, not one PyPI file)
"""

from __future__ import annotations

from pathlib import Path

from zerolab.locations import REPO_ROOT

LOCKS_DIR = REPO_ROOT / "requirements"
DEV_LOCK = LOCKS_DIR / "dev.txt"
ZEROLAB_LOCK = LOCKS_DIR / "zerolab.txt"
ENGINE_LOCK = LOCKS_DIR / "engine.txt"


def lock_lines(path: Path) -> list[str]:
    """A lock's requirement lines (`name==version`, with its environment marker), without the
    hashes, the line continuations and the comments."""
    lines = []
    for line in path.read_text().splitlines():
        text = line.split("#", 1)[0].rstrip(" \\").strip()
        if text and not text.startswith("-"):
            lines.append(text)
    return lines
