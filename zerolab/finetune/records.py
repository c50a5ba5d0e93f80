"""What a fine-tuning run records: OUT/finetune.jsonl, one JSON object per line, written by rank 0
of the loop (zerolab.finetune.loop) and read here. A `train` record per optimizer step (step, steps,
epoch, loss: the global batch's mean, lr, step_ms, samples_per_s, tokens_per_s), an `eval` record
per validation split after each epoch (split, step, epoch, loss and the task's metrics)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

RECORDS_FILE = "finetune.jsonl"


def read_records(folder: Path, kind: str | None = None) -> list[dict[str, Any]]:
    """The records in `folder`/finetune.jsonl, in order; only those of `kind` when given."""
    lines = (folder / RECORDS_FILE).read_text(encoding="utf-8").splitlines()
    records = [json.loads(line) for line in lines if line.strip()]
    return [record for record in records if kind is None or record["kind"] == kind]
