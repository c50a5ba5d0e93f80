"""What a fine-tuning run records: OUT/finetune.jsonl, one JSON object per line, written by rank 0
of the loop (zerolab.finetune.loop, through Records) and read by summaries (scan_records). A
`train` record per optimizer step (step, steps, epoch, loss: the global batch's mean, lr, step_ms,
samples_per_s, tokens_per_s), an `eval` record per validation split after each epoch (split, step,
epoch, loss and the task's metrics)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

RECORDS_FILE = "finetune.jsonl"


class Records:
    """OUT/finetune.jsonl as a run writes it: by rank 0 only, a line at a time, flushed."""

    def __init__(self, out: Path, rank: int) -> None:
        self.file = open(out / RECORDS_FILE, "a", encoding="utf-8") if rank == 0 else None  # noqa: SIM115

    def write(self, record: dict[str, Any]) -> None:
        """Append `record` as one line (rank 0)."""
        if self.file is not None:
            self.file.write(json.dumps(record) + "\n")
            self.file.flush()


def scan_records(folder: Path, problems: list[str]) -> list[dict[str, Any]]:
    """The readable records in `folder`/finetune.jsonl (none when it is absent): a line that is not a
    JSON object with a `kind` (a run cut off mid-write) is left out and named in `problems`."""
    path = folder / RECORDS_FILE
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
                problems.append(f"{RECORDS_FILE}:{number}: not a record (left out)")
                continue
            records.append(record)
    return records
