"""What a fine-tuning run records: OUT/finetune.jsonl, one JSON object per line, written by rank 0
of the loop (zerolab.rank.finetune_loop) and read by summaries (scan_records). A
`train` record per optimizer step (step, steps, epoch, loss: the global batch's mean, lr, step_ms,
samples_per_s, tokens_per_s), an `eval` record per validation split after each epoch (split, step,
epoch, loss and the task's metrics)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from zerolab.contracts import FINETUNE_RECORDS_FILE


def scan_records(folder: Path, problems: list[str]) -> list[dict[str, Any]]:
    """The readable records in `folder`/finetune.jsonl (none when it is absent): a line that is not a
    JSON object with a `kind` (a run cut off mid-write) is left out and named in `problems`."""
    path = folder / FINETUNE_RECORDS_FILE
    if not path.is_file():
        return []
    records = []
    with open(path, encoding="utf-8", errors="replace") as lines:
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except ValueError:
                record = None
            if not isinstance(record, dict) or record.get("kind") not in ("train", "eval"):
                problems.append(f"{FINETUNE_RECORDS_FILE}:{number}: not a record (left out)")
                continue
            records.append(record)
    return records
