"""The GLUE files a fine-tuning reads: one JSON Lines file per task and split, FOLDER/TASK_SPLIT.jsonl
(`wnli_train.jsonl`, `mnli_validation_matched.jsonl`), each line a row in GLUE's columns on the
Hugging Face hub (the task's sentence columns, `label`, `idx`). Written by `zerolab prep glue`
(zerolab.finetune.prep), read by the loop; the samples in data_prep/samples/glue/ are such files.
Standard library and zerolab's own only: the loop reads them in the engine's Python."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from zerolab.errors import UserError
from zerolab.files import write_atomic
from zerolab.finetune.glue import GlueTask

TRAIN_SPLIT = "train"


def split_file(folder: str | Path, task: GlueTask, split: str) -> Path:
    """The file of `task`'s `split` (train, validation, validation_matched ...) in `folder`."""
    return Path(folder) / f"{task.name}_{split}.jsonl"


def task_splits(task: GlueTask) -> tuple[str, ...]:
    """The splits a fine-tuning of `task` reads: train, then the ones it is scored on."""
    return (TRAIN_SPLIT, *task.eval_splits)


def write_split(folder: Path, task: GlueTask, split: str, rows: list[dict[str, Any]]) -> Path:
    """Write `rows` (GLUE's columns; others are left out) as `task`'s `split` file in `folder`, whole."""
    keys = (*task.sentence_keys, "label", "idx")
    text = "".join(
        json.dumps({k: row[k] for k in keys if k in row}, ensure_ascii=False) + "\n" for row in rows
    )
    path = split_file(folder, task, split)
    write_atomic(path, text)
    return path


def read_split(path: str | Path, task: GlueTask) -> list[dict[str, Any]]:
    """The rows of a split file; UserError naming the file and line of a row that is not a JSON
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
                raise UserError(
                    f"{path}:{number}: not JSON ({error.msg}); write one JSON object per line"
                ) from None
            missing = [key for key in needed if not isinstance(row, dict) or key not in row]
            if missing:
                raise UserError(
                    f"{path}:{number}: no {', '.join(f'`{key}`' for key in missing)}: a {task.name} row has "
                    f"{', '.join(needed)} (`zerolab prep glue {task.name}` writes them)"
                )
            rows.append(row)
    return rows
