"""Writing the GLUE files a fine-tuning reads (zerolab.contracts.split_file: FOLDER/TASK_SPLIT.jsonl,
each line a row in GLUE's columns on the Hugging Face hub), for `zerolab prep glue`
(zerolab.finetune.prep); the loop reads them (zerolab.rank.finetune_inputs)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from zerolab.contracts import GlueTask, split_file
from zerolab.errors import UserError


def write_splits(folder: Path, task: GlueTask, rows: dict[str, list[dict[str, Any]]]) -> None:
    """Write each split's `rows` (GLUE's columns; others are left out) as `task`'s file in `folder`,
    as a set: all are written beside their places before any is moved there, and a failure (a full
    disk, Ctrl-C) leaves none of them; an OSError is a UserError naming the file."""
    keys = (*task.sentence_keys, "label", "idx")
    partials: dict[Path, Path] = {}
    placed: list[Path] = []
    path = folder
    try:
        for split, split_rows in rows.items():
            path = split_file(folder, task, split)
            partials[path] = path.with_name(f".{path.name}.{os.getpid()}.partial")
            text = "".join(
                json.dumps({k: row[k] for k in keys if k in row}, ensure_ascii=False) + "\n"
                for row in split_rows
            )
            partials[path].write_text(text, encoding="utf-8")
        for path, partial in partials.items():
            os.replace(partial, path)
            placed.append(path)
    except BaseException as error:
        for path in placed:
            path.unlink(missing_ok=True)
        if isinstance(error, OSError):
            raise UserError(
                f"cannot write {path} ({error.strerror}); none of {task.name}'s files "
                "was written: free space there, or write them into another folder with --out"
            ) from None
        raise
    finally:
        for partial in partials.values():
            partial.unlink(missing_ok=True)
