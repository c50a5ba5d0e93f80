"""The summary as tables: summary.md, summary.csv, summary.json and a rich table, their columns
as zerolab.summarize.columns declares them. An unknown value is empty (null in JSON)."""

from __future__ import annotations

import csv
import io
import json
from typing import Any

from zerolab.summarize.collect import Collection
from zerolab.summarize.columns import ROW_KEYS, table_columns

JSON_SCHEMA_VERSION = 1


def _footnotes(collection: Collection) -> list[str]:
    notes = [
        f"Steady state: median and 10th-90th percentile over the logged intervals after the warm-up "
        f"({collection.options.warmup.describe()}).",
        "Memory: max allocated is the accelerator allocator's peak (on CPU runs, DeepSpeed reports process "
        "memory); host memory is the launcher's process tree when samples.csv exists.",
    ]
    notes += [f"Not summarized: {path}: {reason}" for path, reason in collection.skipped]
    return notes


def to_markdown(collection: Collection) -> str:
    """summary.md: the table and its footnotes."""
    columns = table_columns(collection.sweep_keys)
    headers = [column.table_header for column in columns]
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    for summary in collection.runs:
        cells = [column.table_cell(summary.row).replace("|", "\\|") for column in columns]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n\n" + "\n".join(f"- {note}" for note in _footnotes(collection)) + "\n"


def to_csv(collection: Collection) -> str:
    """summary.csv: every row key as a column (`sweep` as one `sweep.KEY` column per swept key);
    lists joined with `; `, unknown values empty."""
    buffer = io.StringIO()
    swept = {f"sweep.{key}": key for key in collection.sweep_keys}
    keys = [name for key in ROW_KEYS for name in (swept if key == "sweep" else [key])]
    writer = csv.DictWriter(buffer, fieldnames=keys, lineterminator="\n")
    writer.writeheader()
    for summary in collection.runs:
        values = summary.row["sweep"] or {}
        row = {name: values.get(key) for name, key in swept.items()} | {
            k: v for k, v in summary.row.items() if k != "sweep"
        }
        writer.writerow(
            {k: "; ".join(v) if isinstance(v, list) else ("" if v is None else v) for k, v in row.items()}
        )
    return buffer.getvalue()


def to_json(collection: Collection) -> dict[str, Any]:
    """summary.json's object: {schema_version, warmup, sweeps: [{name, recipe, swept}], runs:
    [row...], skipped: [{path, reason}]}."""
    return {
        "schema_version": JSON_SCHEMA_VERSION,
        "warmup": collection.options.warmup.describe(),
        "sweeps": [
            {"name": plan.name, "recipe": plan.recipe, "swept": [entry.model_dump() for entry in plan.swept]}
            for plan in collection.sweeps
        ],
        "runs": [summary.row for summary in collection.runs],
        "skipped": [{"path": path, "reason": reason} for path, reason in collection.skipped],
    }


def json_text(collection: Collection) -> str:
    """summary.json's text."""
    return json.dumps(to_json(collection), indent=2, allow_nan=False) + "\n"


def rich_table(collection: Collection) -> Any:
    """The table for the terminal (a rich Table)."""
    from rich.table import Table

    columns = [column for column in table_columns(collection.sweep_keys) if column.terminal]
    table = Table(title="zerolab summary", caption="\n".join(_footnotes(collection)), caption_justify="left")
    for column in columns:
        table.add_column(column.table_header, overflow="fold")
    for summary in collection.runs:
        table.add_row(*(column.table_cell(summary.row) for column in columns))
    return table
