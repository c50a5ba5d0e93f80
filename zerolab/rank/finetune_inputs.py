"""What the fine-tuning loop reads before it trains: the request (RUN_DIR/request.json,
zerolab.contracts.FinetuneRequest) and the GLUE files (contracts.split_file: one JSON Lines file
per task and split, each line a row in GLUE's columns on the Hugging Face hub, written by `zerolab
prep glue`). Standard library only."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from zerolab.contracts import FinetuneRequest, GlueTask, parse_finetune_request


class InputError(Exception):
    """A file the loop was given is not what it reads; the message names the file (and line)."""


def read_request(path: str | Path) -> FinetuneRequest:
    """The request in `path`; InputError naming the file when it is not one."""
    try:
        return parse_finetune_request(path)
    except ValueError as error:
        raise InputError(str(error)) from None


def read_split(path: str | Path, task: GlueTask) -> list[dict[str, Any]]:
    """The rows of a split file; InputError naming the file and line of a row that is not a JSON
    object with the task's columns and a label."""
    needed = (*task.sentence_keys, "label")
    rows = []
    with open(path, encoding="utf-8") as lines:
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as error:
                raise InputError(
                    f"{path}:{number}: not JSON ({error.msg}); write one JSON object per line"
                ) from None
            missing = [key for key in needed if not isinstance(row, dict) or key not in row]
            if missing:
                raise InputError(
                    f"{path}:{number}: no {', '.join(f'`{key}`' for key in missing)}: a {task.name} row has "
                    f"{', '.join(needed)} (`zerolab prep glue {task.name}` writes them)"
                )
            rows.append(row)
    return rows
