"""`zerolab compare`: each metric of several runs as a ratio to a baseline run."""

from __future__ import annotations

from typing import Any

from zerolab.errors import UserError
from zerolab.summarize.collect import Collection

# (row key, what it is, whether higher is better)
COMPARED_METRICS: tuple[tuple[str, str, bool], ...] = (
    ("tokens_per_s_per_gpu", "tokens/s per GPU", True),
    ("ms_per_iter", "ms per iteration", False),
    ("epoch_time_s", "time per epoch (s)", False),
    ("tflops_per_gpu", "TFLOP/s per GPU", True),
    ("mfu_pct", "MFU (%)", True),
    ("max_allocated_GiB", "max allocated (GiB)", False),
    ("peak_host_GiB", "peak host memory (GiB)", False),
    ("last_loss", "last training loss", False),
    ("val_loss", "validation loss", False),
)


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
    for key, label, higher in COMPARED_METRICS:
        values = {}
        for name, row in rows.items():
            value, reference = row[key], base[key]
            ratio = value / reference if value is not None and reference else None
            values[name] = {"value": value, "ratio": None if ratio is None else round(ratio, 4)}
        metrics[key] = {"label": label, "higher_is_better": higher, "values": values}
    return {"baseline": base_name, "runs": names, "metrics": metrics}


def rich_comparison(result: dict[str, Any]) -> Any:
    """The comparison as a rich Table: one row per metric, `value (ratio x)` per run."""
    from rich.table import Table

    table = Table(title=f"ratio to baseline {result['baseline']}", caption="ratio = run / baseline")
    table.add_column("metric")
    for name in result["runs"]:
        table.add_column(name + (" (baseline)" if name == result["baseline"] else ""), justify="right")
    for metric in result["metrics"].values():
        cells = []
        for name in result["runs"]:
            entry = metric["values"][name]
            if entry["value"] is None:
                cells.append("")
            elif entry["ratio"] is None:
                cells.append(f"{entry['value']:.4g}")
            else:
                cells.append(f"{entry['value']:.4g} ({entry['ratio']:.2f}x)")
        arrow = "higher is better" if metric["higher_is_better"] else "lower is better"
        table.add_row(f"{metric['label']} [{arrow}]", *cells)
    return table
