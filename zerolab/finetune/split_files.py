"""Writing the GLUE files a fine-tuning reads (zerolab.contracts.split_file: FOLDER/TASK_SPLIT.jsonl,
each line a row in GLUE's columns on the Hugging Face hub), for `zerolab prep glue`
(zerolab.finetune.prep); the loop reads them (zerolab.rank.finetune_inputs)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from zerolab.contracts import GlueTask, split_file
from zerolab.files import write_atomic


def write_split(folder: Path, task: GlueTask, split: str, rows: list[dict[str, Any]]) -> Path:
    """Write `rows` (GLUE's columns; others are left out) as `task`'s `split` file in `folder`, whole."""
    keys = (*task.sentence_keys, "label", "idx")
    text = "".join(
        json.dumps({k: row[k] for k in keys if k in row}, ensure_ascii=False) + "\n" for row in rows
    )
    path = split_file(folder, task, split)
    write_atomic(path, text)
    return path
