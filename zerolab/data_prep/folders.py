"""Where prep and the GPU check write: a folder option checked before anything is written. Standard
library only: the GPU check imports it on the machine's bare Python."""

from __future__ import annotations

from pathlib import Path

from zerolab.errors import UserError


def check_folder(folder: Path, what: str, option: str = "--out") -> None:
    """UserError when `folder`, or the first of its parents that exists, is a file (`what`: what the
    folder is for, and `option` the one that gave it, in the message)."""
    taken = next((path for path in (folder, *folder.parents) if path.exists()), None)
    if taken is not None and not taken.is_dir():
        raise UserError(
            f"{option}: {taken} is a file, where {what} goes; move the file, or choose another {option}"
        )
