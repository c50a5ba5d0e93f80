"""`zerolab prep glue TASK`: a GLUE task's train and validation splits from the hub's `nyu-mll/glue`
(or a local copy of it: a dataset directory with its configurations) into the files the fine-tuning
loop reads (zerolab.finetune.split_files). The test splits are left out: GLUE keeps their labels
(-1 on the hub)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.progress import Progress

from zerolab.contracts import GlueTask, split_file, task_splits
from zerolab.data_prep.sources import HubDataset
from zerolab.errors import UserError
from zerolab.finetune.glue import HUB_DATASET
from zerolab.finetune.split_files import write_splits


def prep_glue(
    task: GlueTask, out: Path, dataset: str = HUB_DATASET, *, quiet: bool = False
) -> dict[str, int]:
    """Write `task`'s splits from `dataset` into folder `out`; returns the rows written per split.
    Every split is read before any file is written, and the files are written as a set. Raises
    UserError for a split file already there or a dataset that cannot be read (saying how to do
    without the hub)."""
    there = [path for split in task_splits(task) if (path := split_file(out, task, split)).exists()]
    if there:
        raise UserError(f"{there[0]} exists: remove it, or write {task.name} into another folder with --out")
    by_hand = (
        f"Without access to the Hugging Face hub, copy the dataset repository {HUB_DATASET} (its README.md "
        f"and {task.name}/ folder of parquet files) where you can and pass that folder with --dataset"
    )
    rows: dict[str, list[dict[str, Any]]] = {}
    with Progress(disable=quiet, transient=True) as progress:
        for split in task_splits(task):
            hub = HubDataset(dataset, split=split, config=task.name, by_hand=by_hand)
            loaded = hub.load()
            bar = progress.add_task(f"{task.name} {split}", total=len(loaded))
            rows[split] = []
            for row in hub.guarded(iter(loaded)):
                rows[split].append(row)
                progress.advance(bar)
    out.mkdir(parents=True, exist_ok=True)
    write_splits(out, task, rows)
    return {split: len(split_rows) for split, split_rows in rows.items()}
