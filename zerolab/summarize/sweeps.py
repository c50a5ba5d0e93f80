"""Runs that are cells of a sweep (`zerolab sweep`: their directory's parent holds sweep.json,
read through zerolab.sweep.plan): each row gets the cell's value of every swept key, a sweep's
rows come in its cells' order, and each sweep met is returned with its own rows."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from zerolab.summarize.summary import RunSummary
from zerolab.sweep.plan import Plan, read_plan


@dataclass
class SweepRuns:
    """A sweep met in a summary: its plan and the rows of its cells, in cell order."""

    plan: Plan
    runs: list[RunSummary] = field(default_factory=list)


def attach_sweeps(runs: list[RunSummary]) -> list[SweepRuns]:
    """Set `sweep` on the rows of sweep cells and put each sweep's rows in cell order (where its
    first row stood); returns the sweeps met, each with its rows (directories holding the same
    sweep.json are one sweep). An unreadable sweep.json is named in the row's notes."""
    plans: dict[Path, tuple[Plan | None, str | None]] = {}
    first: dict[Path, int] = {}  # where each directory's first row stood
    place: dict[int, tuple[int, int, int]] = {}
    met: list[SweepRuns] = []
    member: dict[int, SweepRuns] = {}
    for position, summary in enumerate(runs):
        run_dir = Path(summary.row.path)
        parent = run_dir.parent.resolve()
        if parent not in plans:
            plans[parent] = read_plan(run_dir.parent)
            first[parent] = position
        plan, problem = plans[parent]
        if problem:
            summary.row.notes.append(problem)
        cells = {cell.run_dir: index for index, cell in enumerate(plan.cells)} if plan else {}
        if plan is None or run_dir.name not in cells:
            place[id(summary)] = (position, 0, 0)
            continue
        sweep = next((sweep for sweep in met if sweep.plan == plan), None)
        if sweep is None:
            sweep = SweepRuns(plan)
            met.append(sweep)
        member[id(summary)] = sweep
        summary.row.sweep = dict(plan.cells[cells[run_dir.name]].values)
        place[id(summary)] = (first[parent], 1, cells[run_dir.name])
    runs.sort(key=lambda summary: place[id(summary)])
    for summary in runs:
        if id(summary) in member:
            member[id(summary)].runs.append(summary)
    return met
