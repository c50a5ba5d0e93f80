"""Files written whole: a reader never sees half of one, and a crash leaves the old file or none.
Each goes through a temporary file beside it that is renamed into place, with the permissions
of any new file (the umask), or those given."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path
from typing import Any


def write_atomic(path: Path, data: str | bytes, *, mode: int | None = None) -> None:
    """Write `data` (text as UTF-8) to `path` whole; `mode` sets its permissions."""
    partial = path.with_name(f".{path.name}.{os.getpid()}.partial")  # writers side by side: one each
    if isinstance(data, str):
        partial.write_text(data, encoding="utf-8")
    else:
        partial.write_bytes(data)
    if mode is not None:
        os.chmod(partial, mode)
    os.replace(partial, path)


def write_json_atomic(path: Path, data: Any) -> None:
    """Write `data` as indented JSON, whole."""
    write_atomic(path, json.dumps(data, indent=2) + "\n")


def save_png(figure: Any, path: Path, *, dpi: int) -> None:
    """Save a matplotlib figure as a PNG, whole."""
    buffer = io.BytesIO()
    figure.savefig(buffer, dpi=dpi, format="png")
    write_atomic(path, buffer.getvalue())
