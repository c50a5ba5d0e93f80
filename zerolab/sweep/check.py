"""What a sweep does with each cell this time: skip it (completed earlier; failed earlier, unless
--retry-failed), or check its recipe as `zerolab launch` would and run it, or record it as
refused with the checks' message. Shared by the run, its dry run and --slurm."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from zerolab import rundir
from zerolab.errors import UserError, headline
from zerolab.sweep.plan import Plan, PlannedCell, cell_dir, cell_state, locked, move_aside
from zerolab.sweep.progress import CheckProgress

SKIP, RUN, REFUSE = "skip", "run", "refuse"


@dataclass(frozen=True)
class Checked:
    """A cell, its state before this invocation (None: never run), what happens to it now, and
    what the check gave: the prepared launch (or recipe) to run, or the refusal."""

    number: int
    cell: PlannedCell
    state: str | None
    action: str
    ready: Any = None
    refusal: str | None = None

    @property
    def why_skipped(self) -> str:
        """Why a skipped cell does not run."""
        if self.state == rundir.FAILED:
            return "failed earlier; --retry-failed runs it again"
        return "completed earlier"


def check_cells(
    plan: Plan, directory: Path, check: Callable[[PlannedCell], Any], *, retry_failed: bool
) -> list[Checked]:
    """Each cell with its action: completed cells (and failed ones without `retry_failed`) are
    skipped; every other cell is checked by `check`, which returns what to run or raises the
    UserError that refuses it. Their progress is shown on stderr (CheckProgress)."""
    checked = []
    with CheckProgress(len(plan.cells)) as progress:
        for number, cell in enumerate(plan.cells, start=1):
            state = cell_state(directory, cell)
            if state == rundir.COMPLETED or (state == rundir.FAILED and not retry_failed):
                checked.append(Checked(number, cell, state, SKIP))
            else:
                try:
                    checked.append(Checked(number, cell, state, RUN, ready=check(cell)))
                except UserError as error:
                    checked.append(Checked(number, cell, state, REFUSE, refusal=str(error)))
            progress.checked()
    return checked


@contextlib.contextmanager
def checked_and_locked(
    plan: Plan, directory: Path, check: Callable[[PlannedCell], Any], *, retry_failed: bool
) -> Iterator[list[Checked]]:
    """The cells checked (check_cells) with the sweep directory's lock held: from before their
    states are read when the directory exists, else from its creation, once the checks leave
    something to run (every cell refused is a UserError, with nothing written)."""
    if directory.exists():
        with locked(directory):
            checked = check_cells(plan, directory, check, retry_failed=retry_failed)
            refuse_if_nothing_runs(checked)
            yield checked
        return
    checked = check_cells(plan, directory, check, retry_failed=retry_failed)
    refuse_if_nothing_runs(checked)
    with locked(directory):
        yield checked


def checking_line(plan: Plan) -> str:
    """Said before the checks begin: how many cells, of which keys."""
    keys = " x ".join(plan.keys)
    return f"zerolab sweep {plan.name}: checking {len(plan.cells):,} cells ({keys}) as zerolab launch would"


def record_refusal(directory: Path, item: Checked) -> rundir.Status:
    """status.json `refused` in the cell's run directory, its cause the refusal's problems (the
    whole message, with the keys and the fix: the dry run). An earlier refusal for the same cause
    is left as it is (another cause rewrites it); an earlier attempt of another state is moved
    aside."""
    run_dir = cell_dir(directory, item.cell)
    cause = headline(item.refusal or "")
    if item.state == rundir.REFUSED:
        earlier, _ = rundir.read_status(run_dir)
        if earlier is not None and earlier.cause == cause:
            return earlier
    elif item.state is not None:
        move_aside(directory, item.cell, item.state)
    if not run_dir.exists():
        rundir.claim(run_dir)
    return rundir.write_refusal(run_dir, cause)


def nothing_runs(checked: list[Checked]) -> bool:
    """Whether no cell runs now and none ran before: every cell refused (the sweep is refused)."""
    return not any(item.action == RUN or item.state in (rundir.COMPLETED, rundir.FAILED) for item in checked)


def refuse_if_nothing_runs(checked: list[Checked]) -> None:
    """UserError when no cell runs now and none ran before: every cell refused."""
    if not nothing_runs(checked):
        return
    first = checked[0]
    raise UserError(f"every cell was refused, nothing to run; the first, {first.cell.name}:\n{first.refusal}")


def dry_run_head(plan: Plan, directory: Path, note: str | None) -> str:
    """The first lines `zerolab sweep --dry-run` prints, before the checks: the sweep, its size, the
    fixed overrides."""
    keys = " x ".join(plan.keys)
    lines = [
        f"zerolab sweep {plan.name}: {len(plan.cells)} cells of {plan.recipe} ({keys}) into {directory}/",
    ]
    if plan.fixed:
        lines.append(f"every cell: {' '.join(plan.fixed)}")
    if note:
        lines.append(note)
    return "\n".join(lines) + "\n"


def dry_run_text(checked: list[Checked]) -> str:
    """What `zerolab sweep --dry-run` prints after its head: each cell, its overrides and its check
    or state, then the counts."""
    lines: list[str] = []
    width = max(len(item.cell.name) for item in checked)
    for item in checked:
        head = f"{item.number:>4}  {item.cell.name:<{width}}  "
        if item.action == SKIP:
            lines.append(f"{head}skip: {item.why_skipped}")
        elif item.action == RUN:
            again = f" (again: {item.state} earlier)" if item.state else ""
            lines.append(f"{head}ok{again}")
        else:
            message = (item.refusal or "").splitlines() or [""]
            lines.append(f"{head}refused: {message[0]}")
            lines += [f"{'':>6}{line}" for line in message[1:]]
    count = {action: sum(item.action == action for item in checked) for action in (RUN, REFUSE, SKIP)}
    lines.append(
        f"would run {count[RUN]} cell(s); {count[REFUSE]} refused; {count[SKIP]} skipped "
        "(--dry-run: nothing written)"
    )
    return "\n".join(lines) + "\n"
