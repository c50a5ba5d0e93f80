"""The summary as tables: summary.md, summary.csv, summary.json and a rich table.
Every metric's name carries its unit; an unknown value is empty (null in JSON)."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Callable
from typing import Any

from zerolab.summarize.collect import Collection
from zerolab.summarize.summary import STATUS_LABELS

JSON_SCHEMA_VERSION = 1


def _num(value: Any, digits: int = 3) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:,.{digits}g}" if abs(value) < 10**digits else f"{value:,.0f}"
    return str(value)


def human_duration(seconds: float | None) -> str:
    """`22.6 s`, `4.1 min`, `3.2 h`, `2.5 d`."""
    if seconds is None:
        return ""
    for unit, size in (("d", 86400.0), ("h", 3600.0), ("min", 60.0)):
        if seconds >= 2 * size:
            return f"{seconds / size:.1f} {unit}"
    return f"{seconds:.1f} s"


def status_text(row: dict[str, Any]) -> str:
    """`completed`, `running or cut off`, `failed: out of memory: ...`, plus a NaN/overflow mark."""
    text = STATUS_LABELS[row["status"]]
    if row["cause"]:
        text += f": {row['cause']}"
    if row["anomalies"]:
        text += " (NaN or overflow seen)"
    return text


def _spread(row: dict[str, Any], key: str) -> str:
    if row[key] is None:
        return ""
    if row[f"{key}_p10"] is None or row[f"{key}_p10"] == row[f"{key}_p90"]:
        return _num(row[key], 4)
    return f"{_num(row[key], 4)} [{_num(row[f'{key}_p10'], 4)}-{_num(row[f'{key}_p90'], 4)}]"


def _batch(row: dict[str, Any]) -> str:
    if row["micro_batch_size"] is None and row["global_batch_size"] is None:
        return ""
    return f"{_num(row['micro_batch_size'])}/{_num(row['global_batch_size'])}"


def _offload(row: dict[str, Any]) -> str:
    return {True: "yes", False: "no", None: ""}[row["offload"]]


def _loss(row: dict[str, Any]) -> str:
    if row["first_loss"] is None:
        return ""
    return f"{row['first_loss']:.3f} → {row['last_loss']:.3f}"


def _estimate(row: dict[str, Any]) -> str:
    """`7.89 (+0.8%)`: zerolab estimate's predicted peak and its error against max allocated."""
    if row["estimated_peak_GiB"] is None:
        return ""
    error = row["estimate_error_pct"]
    return _num(row["estimated_peak_GiB"]) + (f" ({error:+.1f}%)" if error is not None else "")


def _val(row: dict[str, Any]) -> str:
    parts = [f"{row['val_loss']:.3f}" if row["val_loss"] is not None else "", _num(row["val_ppl"], 4)]
    return " / ".join(parts) if any(parts) else ""


# (header, cell) for the printed and markdown tables
DISPLAY_COLUMNS: tuple[tuple[str, Callable[[dict[str, Any]], str]], ...] = (
    ("run", lambda r: r["name"]),
    ("setup", lambda r: r["setup"] or ""),
    ("model", lambda r: r["model"] or ""),
    ("GPUs", lambda r: _num(r["world_size"])),
    ("ZeRO", lambda r: _num(r["zero_stage"])),
    ("offload", _offload),
    ("micro/global batch", _batch),
    ("precision", lambda r: r["precision"] or ""),
    ("status", status_text),
    ("iterations", lambda r: _num(r["iterations_done"])),
    ("tokens/s per GPU median [p10-p90]", lambda r: _spread(r, "tokens_per_s_per_gpu")),
    ("ms/iteration", lambda r: _num(r["ms_per_iter"], 4)),
    ("time/epoch", lambda r: human_duration(r["epoch_time_s"])),
    ("TFLOP/s per GPU", lambda r: _num(r["tflops_per_gpu"])),
    ("MFU %", lambda r: _num(r["mfu_pct"])),
    ("max allocated GiB", lambda r: _num(r["max_allocated_GiB"])),
    ("estimate GiB (error %)", _estimate),
    ("peak host GiB", lambda r: _num(r["peak_host_GiB"])),
    ("loss first → last", _loss),
    ("val loss / PPL", _val),
)


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
    headers = [header for header, _ in DISPLAY_COLUMNS]
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    for summary in collection.runs:
        cells = [cell(summary.row).replace("|", "\\|") for _, cell in DISPLAY_COLUMNS]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n\n" + "\n".join(f"- {note}" for note in _footnotes(collection)) + "\n"


def to_csv(collection: Collection) -> str:
    """summary.csv: every row key as a column; lists joined with `; `, unknown values empty."""
    buffer = io.StringIO()
    keys = list(collection.runs[0].row) if collection.runs else ["name"]
    writer = csv.DictWriter(buffer, fieldnames=keys, lineterminator="\n")
    writer.writeheader()
    for summary in collection.runs:
        writer.writerow(
            {
                k: "; ".join(v) if isinstance(v, list) else ("" if v is None else v)
                for k, v in summary.row.items()
            }
        )
    return buffer.getvalue()


def to_json(collection: Collection) -> dict[str, Any]:
    """summary.json's object: {schema_version, warmup, runs: [row...], skipped: [{path, reason}]}."""
    return {
        "schema_version": JSON_SCHEMA_VERSION,
        "warmup": collection.options.warmup.describe(),
        "runs": [summary.row for summary in collection.runs],
        "skipped": [{"path": path, "reason": reason} for path, reason in collection.skipped],
    }


def json_text(collection: Collection) -> str:
    """summary.json's text."""
    return json.dumps(to_json(collection), indent=2, allow_nan=False) + "\n"


TERMINAL_LEAVES_OUT = ("model", "ZeRO", "offload", "val loss / PPL")
"""Columns the printed table leaves out (the setup column says ZeRO and offload); summary.md has all."""


def rich_table(collection: Collection) -> Any:
    """The table for the terminal (a rich Table)."""
    from rich.table import Table

    columns = [(h, cell) for h, cell in DISPLAY_COLUMNS if h not in TERMINAL_LEAVES_OUT]
    table = Table(title="zerolab summary", caption="\n".join(_footnotes(collection)), caption_justify="left")
    for header, _ in columns:
        table.add_column(header, overflow="fold")
    for summary in collection.runs:
        table.add_row(*(cell(summary.row) for _, cell in columns))
    return table
