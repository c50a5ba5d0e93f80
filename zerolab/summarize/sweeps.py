"""Runs that are cells of a sweep (`zerolab sweep`: their directory's parent holds sweep.json,
read through zerolab.sweep.plan): each row gets the cell's value of every swept key, and a
sweep's rows come in its cells' order."""

from __future__ import annotations

from pathlib import Path

from zerolab.summarize.summary import RunSummary
from zerolab.sweep.plan import Plan, read_plan


def attach_sweeps(runs: list[RunSummary]) -> list[Plan]:
    """Set `sweep` on the rows of sweep cells and put each sweep's rows in cell order (where its
    first row stood); returns the sweeps met. An unreadable sweep.json is named in the row's notes."""
    plans: dict[Path, tuple[Plan | None, str | None]] = {}
    first: dict[Path, int] = {}  # where each directory's first row stood
    place: dict[int, tuple[int, int, int]] = {}
    met: list[Plan] = []
    for position, summary in enumerate(runs):
        run_dir = Path(summary.row["path"])
        parent = run_dir.parent.resolve()
        if parent not in plans:
            plans[parent] = read_plan(run_dir.parent)
            first[parent] = position
        plan, problem = plans[parent]
        if problem:
            summary.row["notes"].append(problem)
        cells = {cell.run_dir: index for index, cell in enumerate(plan.cells)} if plan else {}
        if plan is None or run_dir.name not in cells:
            place[id(summary)] = (position, 0, 0)
            continue
        if plan not in met:
            met.append(plan)
        summary.row["sweep"] = dict(plan.cells[cells[run_dir.name]].values)
        place[id(summary)] = (first[parent], 1, cells[run_dir.name])
    runs.sort(key=lambda summary: place[id(summary)])
    return met
