"""`zerolab compare`: each metric of several runs as a ratio to a baseline run, beside each run's
status. The baseline is --baseline (a run name or a run directory), else the first run given. A
run that did not complete gets no ratio (its numbers stop where it stopped) and cannot be the
baseline."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

from rich.cells import cell_len
from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from zerolab.errors import UserError
from zerolab.rundir import COMPLETED
from zerolab.summarize.collect import Collection
from zerolab.summarize.columns import METRICS, STATUS_LABELS
from zerolab.summarize.discover import discover
from zerolab.summarize.summary import RunSummary
from zerolab.summarize.tables import MAX_WORD


def _runs_at(runs: list[RunSummary], path: Path) -> list[RunSummary]:
    """The runs found at `path`: a run directory, a file in one, a log file, or a folder of them."""
    try:
        found = {run.path.resolve() for run in discover([path])}
    except UserError:  # a folder holding no run: named as not summarized
        return []
    return [summary for summary in runs if Path(summary.row.path).resolve() in found]


def in_given_order(runs: list[RunSummary], paths: list[Path]) -> list[RunSummary]:
    """`runs` in the order of the paths they were given by; a folder's runs in the summary's order."""
    ordered: dict[int, RunSummary] = {}
    for path in paths:
        ordered.update(
            (id(summary), summary) for summary in _runs_at(runs, path) if id(summary) not in ordered
        )
    ordered.update((id(summary), summary) for summary in runs if id(summary) not in ordered)
    return list(ordered.values())


def _status_text(status: str, cause: str | None) -> str:
    return STATUS_LABELS[status] + (f": {cause}" if cause else "")


def _baseline(runs: list[RunSummary], baseline: str | None) -> RunSummary:
    """--baseline as the name the summary shows, the run's own name, or a path; else the first run."""
    if baseline is None:
        return runs[0]
    matches = [summary for summary in runs if summary.row.name == baseline]
    if not matches:
        matches = [summary for summary in runs if summary.run_name == baseline]
    if not matches and Path(baseline).exists():
        matches = _runs_at(runs, Path(baseline))
    if not matches:
        names = ", ".join(summary.row.name for summary in runs)
        raise UserError(
            f"--baseline {baseline!r} is not one of the runs: {names} (or give its run directory)"
        )
    if len(matches) > 1:
        listing = "; ".join(f"{summary.row.name}: {summary.row.path}" for summary in matches)
        raise UserError(
            f"--baseline {baseline} names {len(matches)} runs: {listing}. Give one run: its run directory, "
            "or its name as the summary shows it"
        )
    return matches[0]


def comparison(
    collection: Collection, baseline: str | None, given: list[Path] | None = None
) -> dict[str, Any]:
    """{baseline, runs, status: {run: {status, cause}}, metrics: {key: {label, higher_is_better,
    values: {run: {value, ratio}}}}, skipped: [{path, reason}]}, the runs in the order of the paths
    `given`; an input not summarized is in `skipped` (and named in the error when too few runs are left).

    ratio = value / baseline's value; None when either is unknown, the baseline's is 0, or the run
    did not complete. UserError when the baseline did not complete."""
    runs = in_given_order(collection.runs, given or [])
    names = [summary.row.name for summary in runs]
    if len(names) < 2:
        skipped = ", ".join(path for path, _ in collection.skipped)
        raise UserError(
            f"compare needs at least two runs; found {len(names)} ({', '.join(names) or 'none'})"
            + (f"; not summarized: {skipped} (why: in the warnings above)" if skipped else "")
        )
    base = _baseline(runs, baseline).row
    if base.status != COMPLETED:
        completed = [summary.row.name for summary in runs if summary.row.status == COMPLETED]
        choices = ", ".join(f"--baseline {shlex.quote(name)}" for name in completed)
        raise UserError(
            f"baseline {base.name} did not complete ({_status_text(base.status, base.cause)}): its numbers "
            f"stop where it stopped, so ratios to them would mislead; choose a completed run: "
            f"{choices or 'none of the runs completed'}"
        )
    metrics = {}
    for column in METRICS:
        values = {}
        for summary in runs:
            row = summary.row
            value, reference = row[column.key], base[column.key]
            ratio = value / reference if value is not None and reference and row.status == COMPLETED else None
            values[row.name] = {"value": value, "ratio": None if ratio is None else round(ratio, 4)}
        metrics[column.key] = {
            "label": column.label,
            "higher_is_better": column.better == "higher",
            "values": values,
        }
    status = {s.row.name: {"status": s.row.status, "cause": s.row.cause} for s in runs}
    skipped = [{"path": path, "reason": reason} for path, reason in collection.skipped]
    return {"baseline": base.name, "runs": names, "status": status, "metrics": metrics, "skipped": skipped}


def _widths(texts: list[str]) -> tuple[int, int]:
    """(narrowest a column of `texts` can be without breaking a word, up to MAX_WORD; widest its
    texts need)."""
    narrowest = min(MAX_WORD, max((cell_len(word) for text in texts for word in text.split()), default=1))
    return narrowest, max(narrowest, max((cell_len(text) for text in texts), default=0))


def rich_comparison(result: dict[str, Any], width: int | None = None) -> Any:
    """The comparison as rich Tables for a terminal `width` cells wide (default: the terminal's):
    each run's status, then one row per metric, `value (ratio x)` per run, `value (no ratio)` for a
    run that did not complete. Runs that do not fit beside each other without breaking a word go on
    in a further table, the metrics first in each. Every text is shown as it is (no rich markup:
    `[higher is better]` or a name's brackets stay)."""
    width = Console().width if width is None else width
    labels = ["status", *(f"{column.label} [{column.better_words}]" for column in METRICS)]
    cells: dict[str, list[str]] = {}
    for name in result["runs"]:
        cells[name] = [_status_text(**result["status"][name])]
        for column in METRICS:
            entry = result["metrics"][column.key]["values"][name]
            if entry["value"] is None:
                cells[name].append("")
            elif result["status"][name]["status"] != COMPLETED:
                cells[name].append(f"{column.text(entry['value'])} (no ratio)")
            elif entry["ratio"] is None:
                cells[name].append(column.text(entry["value"]))
            else:
                cells[name].append(f"{column.text(entry['value'])} ({entry['ratio']:.2f}x)")
    headers = {name: name + (" (baseline)" if name == result["baseline"] else "") for name in result["runs"]}
    needs = {name: _widths([headers[name], *cells[name]]) for name in result["runs"]}
    metric = _widths(["metric", *labels])
    # the table's left border, and the metric column; each column adds its padding and right border
    fresh = width - 1 - (metric[0] + 3)
    parts: list[dict[str, int]] = [{}]
    rooms = [fresh]
    for name in result["runs"]:
        if needs[name][0] + 3 > rooms[-1] and parts[-1]:
            parts.append({})
            rooms.append(fresh)
        parts[-1][name] = needs[name][0]
        rooms[-1] -= needs[name][0] + 3
    needs[""] = metric  # the metric column, "" in each part
    for kept, room in zip(parts, rooms, strict=True):  # the room left: to those needing least first
        kept[""] = metric[0]
        for name in sorted(kept, key=lambda name: needs[name][1] - kept[name]):
            extra = max(0, min(room, needs[name][1] - kept[name]))
            kept[name] += extra
            room -= extra
    tables = []
    for index, kept in enumerate(parts):
        names = [name for name in kept if name]
        several = f" ({index + 1} of {len(parts)})" if len(parts) > 1 else ""
        last = index == len(parts) - 1
        table = Table(
            title=Text(f"ratio to baseline {result['baseline']}{several}"),
            caption="ratio = run / baseline; no ratio for a run that did not complete (its numbers stop "
            "where it stopped)"
            if last
            else None,
        )
        table.add_column("metric", width=kept[""], overflow="fold")
        for name in names:
            table.add_column(Text(headers[name]), justify="right", width=kept[name], overflow="fold")
        for row, label in enumerate(labels):
            table.add_row(Text(label), *(Text(cells[name][row]) for name in names))
        tables.append(table)
    return Group(*tables)
