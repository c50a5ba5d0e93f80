"""`zerolab sweep`: run every cell of a sweep in turn, each planned as `zerolab launch` plans it
(zerolab.launch.plan) and run by its backend into its own run directory under logs/sweeps/NAME/,
then summarize them. The cells run here (hardware.backend local or hostfile); `--slurm` makes
them one array job instead (zerolab.sweep.array).

Re-running the same command resumes: completed cells are skipped, failed ones too unless
--retry-failed; a killed cell (Ctrl-C) or one a stopped sweep left behind runs again, its
earlier attempt moved into .previous/. Ctrl-C stops the running cell (its status `killed`) and
the sweep with it. Exit status: 0 when every cell that could run completed (refused cells
included), 1 when any failed, the stopped cell's (130 on Ctrl-C) when stopped; bad input, or
every cell refused, is a UserError (2) before anything is written (the dry run's too), and every
cell refused at its launch (a failed export of its model) is 2 as well."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from zerolab import rundir
from zerolab.backends.driver import run
from zerolab.backends.local import LocalBackend
from zerolab.engine.doctor import collect
from zerolab.engine.paths import engine_missing
from zerolab.errors import Interrupted, UserError
from zerolab.launch.plan import plan as plan_launch
from zerolab.locations import display_path
from zerolab.recipe.compose import resolve_recipe_path
from zerolab.sweep.cells import Sweep
from zerolab.sweep.check import (
    REFUSE,
    RUN,
    SKIP,
    Checked,
    check_cells,
    checked_and_locked,
    checking_line,
    dry_run_head,
    dry_run_text,
    nothing_runs,
    record_refusal,
)
from zerolab.sweep.plan import (
    Plan,
    PlannedCell,
    cell_dir,
    cell_state,
    check_same_sweep,
    move_aside,
    plan_of,
    sweep_dir,
    write_plan,
)
from zerolab.sweep.progress import SweepProgress, finished_line


def planned(sweep: Sweep, name: str | None, resume: Path | None = None) -> tuple[Plan, Path, bool]:
    """The plan of `sweep` under `name` (default: from the recipe and the swept keys), continuing
    `resume`'s checkpoint in every cell when given, its directory, and whether that directory holds
    it already; UserError when it holds another sweep."""

    recipe_shown = display_path(resolve_recipe_path(sweep.recipe))
    resumed = display_path(resume) if resume is not None else None
    plan = plan_of(sweep, name or sweep.default_name(), recipe_shown, resumed)
    directory = sweep_dir(plan.name)
    existing = check_same_sweep(directory, plan)
    return existing or plan, directory, existing is not None


def dry_run(sweep: Sweep, name: str | None, *, retry_failed: bool, resume: Path | None = None) -> int:
    """Print each cell with its check (ok, or refused with the message: every check of a launch that
    can be made without launching, a GPU here and the port included) or why it is skipped; write
    nothing. Returns 0, or refuses (UserError, 2) where the sweep would be refused: every cell refused."""

    plan, directory, _ = planned(sweep, name, resume)
    missing = engine_missing()
    note = (
        f"the engine is not set up ({missing}): cells checked without it, and the sweep itself refused "
        "until it is (make setup)"
        if missing
        else None
    )
    print(dry_run_head(plan, directory, note), end="", flush=True)
    checker = _checker(plan, directory, engine_required=False)
    checked = check_cells(plan, directory, checker, retry_failed=retry_failed)
    print(dry_run_text(checked), end="", flush=True)
    if nothing_runs(checked):
        raise UserError(
            f"every cell would be refused (above), nothing to run: `zerolab sweep` without --dry-run is "
            f"refused too; fix the first, {checked[0].cell.name}, as its message says"
        )
    return 0


@dataclass(frozen=True)
class SweepRun:
    """How a sweep's run ended: its exit status, its directory, and whether every cell it ran
    ended (so that the sweep is worth summarizing; not after a Ctrl-C)."""

    exit_code: int
    directory: Path
    ended: bool


def run_sweep(
    sweep: Sweep, name: str | None, *, retry_failed: bool, console: Any, resume: Path | None = None
) -> SweepRun:
    """Run the sweep's cells that need running (each continuing `resume`'s checkpoint, when given);
    what to summarize is the caller's (the commands `zerolab sweep` and `zerolab demo`:
    zerolab.summarize.report)."""

    plan, directory, recorded = planned(sweep, name, resume)
    missing = engine_missing()
    if missing:
        raise UserError(f"cannot run the sweep: {missing}")
    console.print(checking_line(plan), soft_wrap=True, markup=False)
    try:
        with checked_and_locked(
            plan, directory, _checker(plan, directory), retry_failed=retry_failed
        ) as checked:
            return _run(plan, directory, checked, console, recorded)
    except KeyboardInterrupt:  # between cells, or as one was written: no cell is left half-made
        kept = (
            f"the cells that ended are in {display_path(directory)}"
            if directory.is_dir()
            else "nothing written"
        )
        raise Interrupted(
            f"the sweep {plan.name} stopped ({kept}); run the same command again to run the unfinished cells"
        ) from None


def _checker(plan: Plan, directory: Path, *, engine_required: bool = True) -> Callable[[PlannedCell], Any]:
    """A cell's check: its launch plan (the recipe with the cell's overrides, the run named after
    the cell, into the cell's run directory), refused where its backend does not run it here."""

    def check(cell: PlannedCell) -> Any:
        words, resume = plan.launch_words(cell)
        planned = plan_launch(
            words,
            resume=resume,
            name=cell.name,
            run_dir=cell_dir(directory, cell),
            engine_required=engine_required,
        )
        if not isinstance(planned.backend, LocalBackend):
            raise UserError(
                f"hardware.backend {planned.backend.name}: a sweep runs its cells here (local, hostfile); "
                "to run them as one SLURM array job, add --slurm"
            )
        return planned

    return check


def _run(plan: Plan, directory: Path, checked: list[Checked], console: Any, recorded: bool) -> SweepRun:

    if not recorded:
        write_plan(directory, plan)
    to_run = [item for item in checked if item.action == RUN]
    skipped = [item for item in checked if item.action == SKIP]
    console.print(
        f"zerolab sweep {plan.name}: {len(plan.cells)} cells ({' x '.join(plan.keys)}) in "
        f"{display_path(directory)}/: {len(to_run)} to run, "
        f"{sum(item.action == REFUSE for item in checked)} refused, {len(skipped)} skipped",
        soft_wrap=True,
        markup=False,
    )
    for item in skipped:
        console.print(f"{item.cell.name}  skipped: {item.why_skipped}", soft_wrap=True, markup=False)
    for item in checked:
        if item.action == REFUSE:
            status = record_refusal(directory, item)
            console.print(finished_line(item.cell.name, status, None), soft_wrap=True)
    if not to_run:
        return _finish(plan, directory, console)
    doctor = collect(cached=True)
    with SweepProgress(console, len(to_run)) as progress:
        for item in to_run:
            if item.state is not None:
                move_aside(directory, item.cell, item.state)
            progress.start(item.cell.name)
            started = time.monotonic()
            try:
                backend = replace(item.ready.backend, doctor=doctor)
                run_dir, status = run(replace(item.ready, backend=backend), echo=progress.echo)
            except UserError as error:  # refused at its launch (its model's export): nothing left of it
                status = record_refusal(
                    directory, replace(item, state=None, action=REFUSE, refusal=str(error))
                )
                progress.done(finished_line(item.cell.name, status, None))
                continue
            progress.done(finished_line(item.cell.name, status, time.monotonic() - started, run_dir))
            if status.state == rundir.KILLED:
                left = len(to_run) - to_run.index(item) - 1
                console.print(
                    f"zerolab sweep: {item.cell.name} {status.cause}; {left} more cell(s) not run. "
                    "Run the same command again to run the unfinished cells.",
                    soft_wrap=True,
                    markup=False,
                )
                return SweepRun(int(status.exit_code or 130), directory, ended=False)
    return _finish(plan, directory, console)


def _finish(plan: Plan, directory: Path, console: Any) -> SweepRun:
    """Count the cells' states; exit status 1 when a cell failed, 2 when every cell was refused
    (some at their launch), else 0."""
    states = [cell_state(directory, cell) for cell in plan.cells]
    counts = {state: states.count(state) for state in dict.fromkeys(states)}
    console.print(
        f"zerolab sweep {plan.name}: " + ", ".join(f"{count} {state}" for state, count in counts.items()),
        soft_wrap=True,
        markup=False,
    )
    if all(state == rundir.REFUSED for state in states):
        return SweepRun(2, directory, ended=True)
    return SweepRun(1 if rundir.FAILED in states else 0, directory, ended=True)
