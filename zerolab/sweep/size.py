"""A sweep's size, said before anything is checked: `--count` prints it and stops; a sweep of more
than LARGE cells is checked and run only when asked for with `--yes`, or confirmed at the terminal
(each cell is checked as `zerolab launch` checks a recipe, tens of milliseconds a cell, and the cells
then run one after the other)."""

from __future__ import annotations

import sys

from zerolab.errors import UserError
from zerolab.sweep.cells import Words

LARGE = 100
"""More cells than this are checked and run only when confirmed (--yes, or y at the terminal)."""


def size_text(words: Words) -> str:
    """`202 cells (train.seed x zero): 101 x 2 values`."""
    counts = " x ".join(str(len(entry.values)) for entry in words.swept.values())
    return f"{words.count:,} cells ({' x '.join(words.keys)}): {counts} values"


def count_text(words: Words, name: str) -> str:
    """What `--count` prints: the sweep's name and size; nothing is checked."""
    return f"zerolab sweep {name}: {size_text(words)} (--count: nothing checked, nothing written)\n"


def confirm_size(words: Words, *, yes: bool, doing: str = "check and run") -> None:
    """Go on with a sweep of at most LARGE cells, or a larger one asked for with `yes` or confirmed
    at the terminal; UserError otherwise, before its cells are made, checked or written. `doing`:
    what the command does with them (`check and run`, `check and list`)."""
    if words.count <= LARGE or yes:
        return
    size = size_text(words)
    why = (
        f"more than {LARGE}: each cell is checked as zerolab launch checks a recipe (minutes for "
        "thousands) before a sweep runs them, one after the other"
    )
    if sys.stdin is not None and sys.stdin.isatty():
        print(f"zerolab sweep: {size}, {why}. {doing.capitalize()} them all? [y/N] ", end="", file=sys.stderr)
        sys.stderr.flush()
        answer = sys.stdin.readline().strip().lower()
        if answer in ("y", "yes"):
            return
        raise UserError(
            f"{size}: not confirmed, nothing checked or written; pass --yes to {doing} them all, "
            "or sweep fewer values (`--dry-run --count` counts the cells)"
        )
    raise UserError(
        f"{size}, {why}. Pass --yes to {doing} them all; `--dry-run --count` counts the cells without "
        "checking them; or sweep fewer values"
    )
