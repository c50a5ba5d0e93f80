"""The summary as tables: summary.md, summary.csv, summary.json and a rich table, their columns
as zerolab.summarize.columns declares them. An unknown value is empty (null in JSON)."""

from __future__ import annotations

import csv
import io
import json
from typing import Any

from rich.cells import cell_len
from rich.table import Table

from zerolab.rundir import COMPLETED
from zerolab.summarize.collect import Collection
from zerolab.summarize.columns import ROW_KEYS, Column, number, table_columns

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
    """summary.md: the table and its footnotes, then the fine-tuning runs' models x setups table."""
    columns = table_columns(collection.sweep_keys)
    headers = [column.table_header for column in columns]
    text = _markdown(headers, [[column.table_cell(s.row) for column in columns] for s in collection.runs])
    text += "\n" + "\n".join(f"- {note}" for note in _footnotes(collection)) + "\n"
    grid = models_by_setups(collection)
    if grid is not None:
        text += f"\n## {FINE_TUNING_TITLE}\n\n{_markdown(*grid)}\n{FINE_TUNING_NOTE}\n"
    return text


FINE_TUNING_TITLE = "Fine-tuning: models x setups"
FINE_TUNING_NOTE = (
    "Each cell: the GLUE score after the last epoch (the task's official metric on its first validation "
    "split), steady-state tokens/s per GPU, max allocated GiB; of several runs of one model, task and "
    "setup, the last listed; empty: not run, or not completed."
)


def models_by_setups(collection: Collection) -> tuple[list[str], list[list[str]]] | None:
    """The fine-tuning runs as a table (headers, rows): a row per model and task, a column per ZeRO
    setup; None without fine-tuning runs."""
    runs = [summary.row for summary in collection.runs if summary.row["task"]]
    if not runs:
        return None
    setups = list(dict.fromkeys(row["setup"] or "?" for row in runs))
    cells: dict[tuple[str, str], dict[str, str]] = {}
    for row in runs:
        line = cells.setdefault((row["model"] or "?", row["task"]), {})
        if row["status"] == COMPLETED:
            parts = [
                f"{row['task_metric']} {row['task_score']:.3f}" if row["task_score"] is not None else "",
                f"{number(row['tokens_per_s_per_gpu'])} tok/s" if row["tokens_per_s_per_gpu"] else "",
                f"{number(row['max_allocated_GiB'])} GiB" if row["max_allocated_GiB"] is not None else "",
            ]
            line[row["setup"] or "?"] = ", ".join(part for part in parts if part)
    headers = ["model", "task", *setups]
    rows = [
        [model, task, *(line.get(setup, "") for setup in setups)] for (model, task), line in cells.items()
    ]
    return headers, rows


def _markdown(headers: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


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
        writer.writerow({k: _csv_value(v) for k, v in row.items()})
    return buffer.getvalue()


def _csv_value(value: Any) -> Any:
    """A list joined with `; `, a mapping as JSON, None empty."""
    if isinstance(value, list):
        return "; ".join(value)
    if isinstance(value, dict):
        return json.dumps(value)
    return "" if value is None else value


def to_json(collection: Collection) -> dict[str, Any]:
    """summary.json's object: {schema_version, warmup, sweeps: [{name, recipe, swept}], runs:
    [row...], skipped: [{path, reason}]}."""
    return {
        "schema_version": JSON_SCHEMA_VERSION,
        "warmup": collection.options.warmup.describe(),
        "sweeps": [
            {"name": plan.name, "recipe": plan.recipe, "swept": [entry.model_dump() for entry in plan.swept]}
            for plan in (sweep.plan for sweep in collection.sweeps)
        ],
        "runs": [summary.row for summary in collection.runs],
        "skipped": [{"path": path, "reason": reason} for path, reason in collection.skipped],
    }


def json_text(collection: Collection) -> str:
    """summary.json's text."""
    return json.dumps(to_json(collection), indent=2, allow_nan=False) + "\n"


MAX_WORD = 24
"""In the printed table a longer word (a path in a failure's cause) is folded, not a wider column."""
MAX_CELL = 40
"""A longer cell (a failure's cause) wraps rather than widening its column past this."""


def _widths(column: Column, cells: list[str]) -> tuple[int, int]:
    """(narrowest without breaking a word of the header or cells, widest any cell needs)."""
    words = [word for text in (column.table_header, *cells) for word in text.split()]
    narrowest = min(MAX_WORD, max((cell_len(word) for word in words), default=1))
    return narrowest, max(narrowest, min(MAX_CELL, max((cell_len(cell) for cell in cells), default=0)))


def terminal_columns(collection: Collection, width: int | None) -> tuple[dict[str, int], list[Column]]:
    """({key: width} of the printed table's columns that fit `width` cells; the columns left out).
    Columns are taken by their `terminal` rank while they fit at their narrowest; the room left
    widens them up to what their cells need, those needing least first (the most columns without a
    wrapped cell). None: every column, rich's widths."""
    table = table_columns(collection.sweep_keys)
    columns = sorted((column for column in table if column.terminal), key=lambda column: column.terminal or 0)
    if width is None:
        return {column.key: 0 for column in columns}, []
    needs = {c.key: _widths(c, [c.table_cell(summary.row) for summary in collection.runs]) for c in columns}
    kept: dict[str, int] = {}
    room = width - 1  # the table's left border; each column adds its padding (2) and right border (1)
    for column in columns:
        narrowest = needs[column.key][0]
        if narrowest + 3 <= room:
            kept[column.key] = narrowest
            room -= narrowest + 3
    for key in sorted(kept, key=lambda key: needs[key][1] - kept[key]):  # most columns unwrapped
        extra = min(room, needs[key][1] - kept[key])
        kept[key] += extra
        room -= extra
    return kept, [column for column in table if column.terminal and column.key not in kept]


def rich_table(collection: Collection, width: int | None = None) -> Any:
    """The table for a terminal `width` cells wide (a rich Table): the columns that fit, and a
    caption naming those left out (None: every column)."""

    widths, left_out = terminal_columns(collection, width)
    columns = [column for column in table_columns(collection.sweep_keys) if column.key in widths]
    notes = _footnotes(collection)
    if left_out:
        names = ", ".join(column.table_header for column in left_out)
        notes.insert(0, f"left out at this width: {names} (every column is in summary.md)")
    table = Table(title="zerolab summary", caption="\n".join(notes), caption_justify="left")
    for column in columns:
        table.add_column(column.table_header, overflow="fold", width=widths[column.key] or None)
    for summary in collection.runs:
        table.add_row(*(column.table_cell(summary.row) for column in columns))
    return table
