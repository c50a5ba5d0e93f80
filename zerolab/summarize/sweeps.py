"""Runs that are cells of a sweep (`zerolab sweep`: their directory's parent holds sweep.json,
read through zerolab.sweep.plan): each row gets the cell's value of every swept key, a sweep's
rows come in its cells' order, and each sweep met is returned with its own rows and a label of its
own (its name, or where sweeps of one name meet, its folder's last parts)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from zerolab.summarize.summary import RunSummary
from zerolab.sweep.plan import Plan, read_plan


@dataclass
class SweepRuns:
    """A sweep met in a summary: its plan and the rows of its cells, in cell order."""

    plan: Plan
    folder: Path
    """Its directory, as the first of its runs was given."""
    runs: list[RunSummary] = field(default_factory=list)
    label: str = ""
    """What tells it from the other sweeps met: its name, or where several share that name, as many
    of its folder's last parts as it takes (`a/demo`, `b/demo`)."""


def shortest_tails(paths: list[Path]) -> list[str]:
    """Each of `paths` as its last parts, as few as tell them all apart (`a/demo`, `b/demo`)."""
    parts = [path.parts for path in paths]
    longest = max(map(len, parts), default=0)
    depth = next((n for n in range(1, longest + 1) if len({p[-n:] for p in parts}) == len(parts)), longest)
    return ["/".join(path[-depth:]) for path in parts]


def attach_sweeps(runs: list[RunSummary]) -> list[SweepRuns]:
    """Set `sweep` on the rows of sweep cells and put each sweep's rows in cell order (where its
    first row stood); returns the sweeps met, each with its rows and label (directories holding the
    same sweep.json are one sweep). An unreadable sweep.json is named in the row's notes."""
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
            sweep = SweepRuns(plan, run_dir.parent)
            met.append(sweep)
        member[id(summary)] = sweep
        summary.row.sweep = dict(plan.cells[cells[run_dir.name]].values)
        place[id(summary)] = (first[parent], 1, cells[run_dir.name])
    runs.sort(key=lambda summary: place[id(summary)])
    for summary in runs:
        if id(summary) in member:
            member[id(summary)].runs.append(summary)
    for sweep in met:
        namesakes = [other for other in met if other.plan.name == sweep.plan.name]
        tails = shortest_tails([other.folder for other in namesakes]) if len(namesakes) > 1 else None
        sweep.label = tails[namesakes.index(sweep)] if tails else sweep.plan.name
    return met
