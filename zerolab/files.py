"""Files written whole: a reader never sees half of one, and a crash leaves the old file or none.
Each goes through a temporary file beside it that is renamed into place, with the permissions
of any new file (the umask), or those given. Also folders made for a job and removed again when it
fails, a folder written whole, and the command every generated document shares."""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
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


@contextlib.contextmanager
def folders_made(directory: Path) -> Iterator[None]:
    """Create `directory` and the parents it lacks; when the block raises, remove again those it
    created that the block left empty (deepest first), so that a refused job leaves no folder."""
    created = [folder for folder in (directory, *directory.parents) if not folder.exists()]
    directory.mkdir(parents=True, exist_ok=True)
    try:
        yield
    except BaseException:
        for folder in created:
            with contextlib.suppress(OSError):  # not empty: something was written into it
                folder.rmdir()
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def folder_written_whole(out: Path) -> Iterator[Path]:
    """A temporary folder beside `out` to fill; when the block ends well it becomes `out` (which must
    be absent or empty), with the permissions of new files and folders; otherwise it is removed."""
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = Path(tempfile.mkdtemp(prefix=f".{out.name}.partial-", dir=out.parent))
    try:
        yield partial
        mask = _umask()
        for path in [partial, *partial.rglob("*")]:
            os.chmod(path, (0o777 if path.is_dir() else 0o666) & ~mask)
        if out.is_dir():
            out.rmdir()
        partial.rename(out)
    finally:
        shutil.rmtree(partial, ignore_errors=True)


def with_section(text: str, begin: str, end: str, body: str) -> str:
    """`text` with what stands between its `begin` and `end` marker lines replaced by `body`."""
    head, _, rest = text.partition(begin)
    _, _, tail = rest.partition(end)
    return f"{head}{begin}\n{body}{end}{tail}"


def generated_doc_main(path: Path, text: Callable[[], str], argv: list[str] | None = None) -> int:
    """The command of a generated document (`python -m MODULE [--check]`, run by `make docs`):
    write `path` from `text()`, or with --check exit 1 when the file differs from it (stale)."""
    parser = argparse.ArgumentParser(
        description=f"write {path.name}, or with --check say whether it is stale"
    )
    parser.add_argument("--check", action="store_true", help=f"exit 1 when {path.name} is stale")
    args = parser.parse_args(argv)
    wanted = text()
    if args.check:
        current = path.read_text(encoding="utf-8") if path.is_file() else ""
        if current != wanted:
            print(f"{path} is stale: run `make docs`", file=sys.stderr)
            return 1
        return 0
    write_atomic(path, wanted)
    print(f"wrote {path}")
    return 0
