"""The summary as tables: summary.md, summary.csv, summary.json and a rich table, their columns
as zerolab.summarize.columns declares them. An unknown value is empty (null in JSON)."""

from __future__ import annotations

import csv
import io
import json
from typing import Any

from rich.cells import cell_len
from rich.console import Group
from rich.table import Table
from rich.text import Text

from zerolab.rundir import COMPLETED
from zerolab.summarize.collect import Collection
from zerolab.summarize.columns import ROW_KEYS, TERMINAL_ALWAYS, Column, number, table_columns
from zerolab.summarize.summary import SCORED_AS

JSON_SCHEMA_VERSION = 1


def _footnotes(collection: Collection) -> list[str]:
    notes = [
        f"Steady state: median and 10th-90th percentile over the logged intervals after the warm-up "
        f"({collection.options.warmup.describe()}).",
        "Memory: max allocated is the accelerator allocator's peak (on CPU runs, DeepSpeed reports process "
        "memory); host memory is the launcher's process tree when samples.csv exists.",
    ]
    notes += [f"Not summarized: {path}: {reason}" for path, reason in collection.skipped]
    scored_as: dict[str, list[str]] = {}
    for summary in collection.runs:
        for note in summary.row.notes:
            if note.startswith(SCORED_AS):
                scored_as.setdefault(note, []).append(summary.row.name)
    notes += [f"{', '.join(names)}: {note}" for note, names in scored_as.items()]
    return notes


def shown_columns(collection: Collection) -> tuple[Column, ...]:
    """The tables' columns: TABLE with a column per swept key after the run's name, less `setup`
    where a swept key's column says the same in every row (a sweep over `zero`: its `z1` is the
    setup's `z1`)."""
    columns = table_columns(collection.sweep_keys)
    setup = next(column for column in columns if column.key == "setup")
    texts = [setup.table_cell(summary.row) for summary in collection.runs]
    for column in columns:
        if column.key.startswith("sweep.") and [column.table_cell(s.row) for s in collection.runs] == texts:
            return tuple(column for column in columns if column is not setup)
    return columns


def to_markdown(collection: Collection) -> str:
    """summary.md: the table and its footnotes, then the fine-tuning runs' models x setups table."""
    columns = shown_columns(collection)
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
    runs = [summary.row for summary in collection.runs if summary.row.task]
    if not runs:
        return None
    setups = list(dict.fromkeys(row.setup or "?" for row in runs))
    cells: dict[tuple[str, str], dict[str, str]] = {}
    for row in runs:
        line = cells.setdefault((row.model or "?", row.task), {})
        if row.status == COMPLETED:
            parts = [
                f"{row.task_metric} {row.task_score:.3f}" if row.task_score is not None else "",
                f"{number(row.tokens_per_s_per_gpu)} tok/s" if row.tokens_per_s_per_gpu else "",
                f"{number(row.max_allocated_GiB)} GiB" if row.max_allocated_GiB is not None else "",
            ]
            line[row.setup or "?"] = ", ".join(part for part in parts if part)
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
        values = summary.row.sweep or {}
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
        "runs": [dict(summary.row.items()) for summary in collection.runs],
        "skipped": [{"path": path, "reason": reason} for path, reason in collection.skipped],
    }


def json_text(collection: Collection) -> str:
    """summary.json's text."""
    return json.dumps(to_json(collection), indent=2, allow_nan=False) + "\n"


MAX_WORD = 24
"""In the printed table a longer word (a path in a failure's cause) is folded, not a wider column."""
MAX_CELL = 40
"""A longer cell (a failure's cause) wraps rather than widening its column past this."""
PLACED = 20
"""Where the terminal is narrow, a column first gets what its cells need up to this width (a number
with its spread, a loss's first → last, unwrapped), a longer text (a failure's cause) wraps; it is
widened only with the room left once the numbers have theirs."""


def _widths(column: Column, cells: list[str]) -> tuple[int, int]:
    """(narrowest without breaking a word of the header or cells, widest any cell needs)."""
    words = [word for text in (column.table_header, *cells) for word in text.split()]
    narrowest = min(MAX_WORD, max((cell_len(word) for word in words), default=1))
    return narrowest, max(narrowest, min(MAX_CELL, max((cell_len(cell) for cell in cells), default=0)))


def terminal_columns(collection: Collection, width: int | None) -> tuple[list[dict[str, int]], list[Column]]:
    """The printed tables for a terminal `width` cells wide: for each, {key: width} of its columns;
    and the columns left out. The run's name begins every table. The columns ranked up to
    TERMINAL_ALWAYS (the numbers a user came for) come first, each into the first table with room
    for what its cells need (up to PLACED), else for its narrowest (no word broken), else into a new
    table; the name
    and then they are widened up to what their cells need (those needing least first: the most
    columns without a wrapped cell). The other columns, by rank, take the room left where they fit
    (one empty for every run: only in the first table), and are widened with what remains; the rest
    are left out.
    None: one table of every column, rich's widths."""
    table = shown_columns(collection)
    cells = {c.key: [c.table_cell(s.row) for s in collection.runs] for c in table if c.terminal}
    empty = {key for key, texts in cells.items() if not any(texts)}
    ranked = sorted(
        (column for column in table if column.terminal),
        key=lambda column: (column.key in empty, column.terminal or 0),
    )
    if width is None:
        return [{column.key: 0 for column in ranked}], []
    needs = {column.key: _widths(column, cells[column.key]) for column in ranked}
    name, *others = ranked
    essential = [c for c in others if c.key not in empty and (c.terminal or 0) <= TERMINAL_ALWAYS]
    name_width = needs[name.key][0]
    # the table's left border; each column adds its padding (2) and right border (1)
    fresh = width - 1 - (name_width + 3)
    tables: list[dict[str, int]] = [{}]
    rooms = [fresh]

    def place(column: Column, candidates: int, may_open: bool) -> None:
        """Into the first table with room for what its cells need (up to PLACED), else for its
        narrowest, else (`may_open`) into a new table."""
        narrowest, widest = needs[column.key]
        placed = max(narrowest, min(widest, PLACED))
        for cells_width in (placed, narrowest):
            at = next((i for i, room in enumerate(rooms[:candidates]) if cells_width + 3 <= room), None)
            if at is not None:
                break
        else:
            if not may_open:
                return
            tables.append({})
            rooms.append(fresh)
            at = len(tables) - 1
            cells_width = max(1, min(placed, fresh - 3))  # wider than the terminal: folded
        tables[at][column.key] = cells_width
        rooms[at] -= cells_width + 3

    def widen() -> None:
        for at, kept in enumerate(tables):
            for key in sorted(kept, key=lambda key: needs[key][1] - kept[key]):  # most unwrapped
                extra = max(0, min(rooms[at], needs[key][1] - kept[key]))
                kept[key] += extra
                rooms[at] -= extra

    for column in essential:
        place(column, len(rooms), may_open=True)
    extra = max(0, min(*rooms, needs[name.key][1] - name_width))
    name_width += extra
    rooms = [room - extra for room in rooms]
    widen()
    for column in others:
        if column not in essential:
            place(column, 1 if column.key in empty else len(rooms), may_open=False)
    widen()
    shown = {key for kept in tables for key in kept}
    left_out = [
        column for column in table if column.terminal and column is not name and column.key not in shown
    ]
    return [{name.key: name_width} | kept for kept in tables], left_out


def rich_table(collection: Collection, width: int | None = None) -> Any:
    """The table for a terminal `width` cells wide (rich renderables): the columns that fit, going
    on in further tables where the columns ranked up to TERMINAL_ALWAYS do not fit one, and a caption
    naming those left out (None: every column). Every text is shown as it is (no rich markup: a
    header's `[p10-p90]` or a cause's `[rank1]` stays)."""

    widths, left_out = terminal_columns(collection, width)
    shown = shown_columns(collection)
    notes = _footnotes(collection)
    empty = [column for column in left_out if not any(column.table_cell(s.row) for s in collection.runs)]
    if empty:
        names = ", ".join(column.table_header for column in empty)
        notes.insert(0, f"not shown, empty for every run: {names}")
    if len(left_out) > len(empty):
        names = ", ".join(column.table_header for column in left_out if column not in empty)
        notes.insert(0, f"left out at this width: {names} (every column is in summary.md)")
    parts = []
    for index, kept in enumerate(widths):
        last = index == len(widths) - 1
        title = "zerolab summary" + (f" ({index + 1} of {len(widths)})" if len(widths) > 1 else "")
        table = Table(
            title=title,
            caption=Text("\n".join(notes)) if last else None,
            caption_justify="left",
        )
        columns = [column for column in shown if column.key in kept]
        for column in columns:
            table.add_column(Text(column.table_header), overflow="fold", width=kept[column.key] or None)
        for summary in collection.runs:
            table.add_row(*(Text(column.table_cell(summary.row)) for column in columns))
        parts.append(table)
    return Group(*parts)
