"""`zerolab compare`: each metric of several runs as a ratio to a baseline run, beside each run's
status. The baseline is --baseline (a run name or a run directory), else the first run given. A
run that did not complete gets no ratio (its numbers stop where it stopped) and cannot be the
baseline."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

from rich.table import Table

from zerolab.errors import UserError
from zerolab.rundir import COMPLETED
from zerolab.summarize.collect import Collection
from zerolab.summarize.columns import METRICS, STATUS_LABELS
from zerolab.summarize.discover import discover
from zerolab.summarize.summary import RunSummary


def _runs_at(runs: list[RunSummary], path: Path) -> list[RunSummary]:
    """The runs found at `path`: a run directory, a file in one, a log file, or a folder of them."""
    found = {run.path.resolve() for run in discover([path])}
    return [summary for summary in runs if Path(summary.row["path"]).resolve() in found]


def in_given_order(runs: list[RunSummary], paths: list[Path]) -> list[RunSummary]:
    """`runs` in the order of the paths they were given by; a folder's runs in the summary's order."""
    ordered: dict[int, RunSummary] = {}
    for path in paths:
        ordered.update(
            (id(summary), summary) for summary in _runs_at(runs, path) if id(summary) not in ordered
        )
    ordered.update((id(summary), summary) for summary in runs if id(summary) not in ordered)
    return list(ordered.values())


def _status_text(row: dict[str, Any]) -> str:
    return STATUS_LABELS[row["status"]] + (f": {row['cause']}" if row["cause"] else "")


def _baseline(runs: list[RunSummary], baseline: str | None) -> RunSummary:
    """--baseline as the name the summary shows, the run's own name, or a path; else the first run."""
    if baseline is None:
        return runs[0]
    matches = [summary for summary in runs if summary.row["name"] == baseline]
    if not matches:
        matches = [summary for summary in runs if summary.run_name == baseline]
    if not matches and Path(baseline).exists():
        matches = _runs_at(runs, Path(baseline))
    if not matches:
        names = ", ".join(summary.row["name"] for summary in runs)
        raise UserError(
            f"--baseline {baseline!r} is not one of the runs: {names} (or give its run directory)"
        )
    if len(matches) > 1:
        listing = "; ".join(f"{summary.row['name']}: {summary.row['path']}" for summary in matches)
        raise UserError(
            f"--baseline {baseline} names {len(matches)} runs: {listing}. Give one run: its run directory, "
            "or its name as the summary shows it"
        )
    return matches[0]


def comparison(
    collection: Collection, baseline: str | None, given: list[Path] | None = None
) -> dict[str, Any]:
    """{baseline, runs, status: {run: {status, cause}}, metrics: {key: {label, higher_is_better,
    values: {run: {value, ratio}}}}}, the runs in the order of the paths `given`.

    ratio = value / baseline's value; None when either is unknown, the baseline's is 0, or the run
    did not complete. UserError when the baseline did not complete."""
    runs = in_given_order(collection.runs, given or [])
    names = [summary.row["name"] for summary in runs]
    if len(names) < 2:
        raise UserError(f"compare needs at least two runs; found {len(names)} ({', '.join(names) or 'none'})")
    base = _baseline(runs, baseline).row
    if base["status"] != COMPLETED:
        completed = [summary.row["name"] for summary in runs if summary.row["status"] == COMPLETED]
        choices = ", ".join(f"--baseline {shlex.quote(name)}" for name in completed)
        raise UserError(
            f"baseline {base['name']} did not complete ({_status_text(base)}): its numbers stop where it "
            f"stopped, so ratios to them would mislead; choose a completed run: "
            f"{choices or 'none of the runs completed'}"
        )
    metrics = {}
    for column in METRICS:
        values = {}
        for summary in runs:
            row = summary.row
            value, reference = row[column.key], base[column.key]
            ratio = (
                value / reference if value is not None and reference and row["status"] == COMPLETED else None
            )
            values[row["name"]] = {"value": value, "ratio": None if ratio is None else round(ratio, 4)}
        metrics[column.key] = {
            "label": column.label,
            "higher_is_better": column.better == "higher",
            "values": values,
        }
    status = {s.row["name"]: {"status": s.row["status"], "cause": s.row["cause"]} for s in runs}
    return {"baseline": base["name"], "runs": names, "status": status, "metrics": metrics}


def rich_comparison(result: dict[str, Any]) -> Any:
    """The comparison as a rich Table: each run's status, then one row per metric, `value (ratio x)`
    per run, `value (no ratio)` for a run that did not complete."""

    table = Table(
        title=f"ratio to baseline {result['baseline']}",
        caption="ratio = run / baseline; no ratio for a run that did not complete (its numbers stop where "
        "it stopped)",
    )
    table.add_column("metric")
    for name in result["runs"]:
        table.add_column(name + (" (baseline)" if name == result["baseline"] else ""), justify="right")
    table.add_row("status", *(_status_text(result["status"][name]) for name in result["runs"]))
    for column in METRICS:
        metric = result["metrics"][column.key]
        cells = []
        for name in result["runs"]:
            entry = metric["values"][name]
            if entry["value"] is None:
                cells.append("")
            elif result["status"][name]["status"] != COMPLETED:
                cells.append(f"{column.text(entry['value'])} (no ratio)")
            elif entry["ratio"] is None:
                cells.append(column.text(entry["value"]))
            else:
                cells.append(f"{column.text(entry['value'])} ({entry['ratio']:.2f}x)")
        table.add_row(f"{column.label} [{column.better_words}]", *cells)
    return table
