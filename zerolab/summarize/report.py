"""A summary written: the runs under some paths summarized (with progress and their warnings on
stderr) into summary.md, summary.csv, summary.json and the PNG plots in one folder, and the table
printed. `zerolab summarize`, a finished sweep and the demo all write it through here."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console
from rich.progress import Progress
from rich.table import Table
from rich.text import Text

from zerolab.errors import UserError
from zerolab.files import write_atomic
from zerolab.summarize import tables
from zerolab.summarize.collect import Collection, summarize_paths
from zerolab.summarize.discover import Run
from zerolab.summarize.plots import write_plots
from zerolab.summarize.summary import Options
from zerolab.summarize.sweep_plots import write_sweep_plots

OUTPUT_FILES = ("summary.md", "summary.csv", "summary.json")


@dataclass
class Report:
    """What a summary wrote: its runs, the folder, the plots written and those skipped with why."""

    collection: Collection
    out: Path
    plots: list[Path] = field(default_factory=list)
    skipped_plots: list[str] = field(default_factory=list)


def collect(paths: list[Path], options: Options) -> Collection:
    """Every run under `paths`, summarized, with a progress bar (on a terminal), and on stderr each
    run's warnings and each input not summarized, with why; UserError when none could be summarized."""
    console = Console(stderr=True)
    # off a terminal a transient bar would only leave a blank line (before an error, too)
    with Progress(console=console, transient=True, disable=not console.is_terminal) as progress:
        task = progress.add_task("parsing logs", total=None)

        def advance(run: Run) -> None:
            progress.update(task, description=f"parsing {run.path}")

        collection = summarize_paths(paths, options, advance)
    if not collection.runs:
        reasons = "; ".join(f"{path}: {reason}" for path, reason in collection.skipped)
        raise UserError(f"no run could be summarized: {reasons}")
    warnings = [warning for summary in collection.runs for warning in summary.warnings]
    warnings += [f"not summarized: {path}: {reason}" for path, reason in collection.skipped]
    for warning in warnings:
        console.print(f"warning: {warning}", style="yellow", markup=False, highlight=False, soft_wrap=True)
    return collection


def default_out(paths: list[Path]) -> Path:
    """Next to the runs: the directory given, a file's directory, or the paths' common directory."""
    directories = [p if p.is_dir() else p.parent for p in paths]
    if len(directories) == 1:
        return directories[0]
    return Path(os.path.commonpath([d.resolve() for d in directories]))


def write_report(collection: Collection, out: Path, *, plots: bool = True) -> Report:
    """Write the tables (and the plots) into `out`; UserError when it cannot be written."""

    report = Report(collection, out)
    try:
        out.mkdir(parents=True, exist_ok=True)
        texts = (tables.to_markdown(collection), tables.to_csv(collection), tables.json_text(collection))
        for name, text in zip(OUTPUT_FILES, texts, strict=True):
            write_atomic(out / name, text)
        for write in (write_plots, write_sweep_plots) if plots else ():  # a sweep's after the others
            found, skipped = write(collection, out)
            report.plots += found
            report.skipped_plots += skipped
    except OSError as error:
        raise UserError(
            f"cannot write the summary to {out}: {error.strerror or error} (choose another --out)"
        ) from None
    return report


def print_report(report: Report, *, as_json: bool = False) -> None:
    """The table (or the JSON) on stdout, then what was written."""
    if as_json:
        sys.stdout.write(tables.json_text(report.collection))
        return
    console = Console()  # the terminal's width (COLUMNS, else the terminal, else 80)
    console.print(tables.rich_table(report.collection, console.width))
    grid = tables.models_by_setups(report.collection)
    if grid is not None:
        headers, rows = grid
        table = Table(title=tables.FINE_TUNING_TITLE, caption=tables.FINE_TUNING_NOTE)
        for header in headers:
            table.add_column(Text(header))
        for row in rows:
            table.add_row(*map(Text, row))
        console.print(table)
    lines = [f"wrote {', '.join(str(report.out / n) for n in OUTPUT_FILES)}"]
    lines += [f"wrote {path}" for path in report.plots]
    lines += [f"no plot {reason}" for reason in report.skipped_plots]
    for line in lines:  # paths and names as they are (no rich markup)
        console.print(line, soft_wrap=True, markup=False)


def summarize_sweep(directory: Path) -> Report | None:
    """Summarize a sweep that ended into its directory, plots included, and print the table: what
    `zerolab sweep` and the demo do after their cells. A summary that cannot be made is said on
    stderr (None): the sweep's exit status stays its cells'."""
    try:
        report = write_report(collect([directory], Options()), directory)
    except UserError as error:
        print(f"zerolab: error: {error}", file=sys.stderr)
        return None
    print_report(report)
    return report
