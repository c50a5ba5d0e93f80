"""`zerolab compare`: each metric of several runs as a ratio to a baseline run."""

from __future__ import annotations

from typing import Any

from zerolab.errors import UserError
from zerolab.summarize.collect import Collection
from zerolab.summarize.columns import METRICS


def comparison(collection: Collection, baseline: str | None) -> dict[str, Any]:
    """{baseline, runs, metrics: {key: {label, higher_is_better, values: {run: {value, ratio}}}}}.

    ratio = value / baseline's value (None when either is unknown or the baseline is 0)."""
    names = [summary.row["name"] for summary in collection.runs]
    if len(names) < 2:
        raise UserError(f"compare needs at least two runs; found {len(names)} ({', '.join(names) or 'none'})")
    base_name = baseline or names[0]
    if base_name not in names:
        raise UserError(f"--baseline {base_name!r} is not one of the runs: {', '.join(names)}")
    rows = {summary.row["name"]: summary.row for summary in collection.runs}
    base = rows[base_name]
    metrics = {}
    for column in METRICS:
        values = {}
        for name, row in rows.items():
            value, reference = row[column.key], base[column.key]
            ratio = value / reference if value is not None and reference else None
            values[name] = {"value": value, "ratio": None if ratio is None else round(ratio, 4)}
        metrics[column.key] = {
            "label": column.label,
            "higher_is_better": column.better == "higher",
            "values": values,
        }
    return {"baseline": base_name, "runs": names, "metrics": metrics}


def rich_comparison(result: dict[str, Any]) -> Any:
    """The comparison as a rich Table: one row per metric, `value (ratio x)` per run."""
    from rich.table import Table

    table = Table(title=f"ratio to baseline {result['baseline']}", caption="ratio = run / baseline")
    table.add_column("metric")
    for name in result["runs"]:
        table.add_column(name + (" (baseline)" if name == result["baseline"] else ""), justify="right")
    for column in METRICS:
        metric = result["metrics"][column.key]
        cells = []
        for name in result["runs"]:
            entry = metric["values"][name]
            if entry["value"] is None:
                cells.append("")
            elif entry["ratio"] is None:
                cells.append(column.text(entry["value"]))
            else:
                cells.append(f"{column.text(entry['value'])} ({entry['ratio']:.2f}x)")
        table.add_row(f"{column.label} [{column.better_words}]", *cells)
    return table
