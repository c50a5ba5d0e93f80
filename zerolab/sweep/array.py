"""`zerolab sweep ... --slurm`: the sweep as one sbatch array job instead of running it here, one
array task per cell to run, each the job `zerolab render --slurm` renders for that cell's recipe
(zerolab.backends.slurm_script) writing into the cell's run directory. The cells to run are chosen as a
run here chooses them (completed skipped, failed only with --retry-failed); refused cells are
recorded here, as a run records them, so the sweep's summary shows them."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from zerolab.backends.slurm_options import BACKEND_WORD
from zerolab.backends.slurm_script import ArrayTask, sbatch_array
from zerolab.files import write_atomic
from zerolab.launch.plan import plan as plan_launch
from zerolab.locations import display_path
from zerolab.sweep.cells import Sweep
from zerolab.sweep.check import (
    REFUSE,
    RUN,
    Checked,
    check_cells,
    checked_and_locked,
    checking_line,
    record_refusal,
)
from zerolab.sweep.plan import SBATCH_FILE, PlannedCell, cell_dir, previous_prefix, write_plan
from zerolab.sweep.run import planned

RENDERED_BY = "zerolab sweep --slurm"


def write_array_job(
    sweep: Sweep,
    name: str | None,
    *,
    retry_failed: bool,
    options: Any,
    dry_run: bool,
    resume: Path | None = None,
) -> int:
    """Write sweep.json, the refused cells' status and sweep.sbatch into the sweep directory (with
    `dry_run`: print the script, write nothing); returns 0 (bad input is a UserError)."""

    plan, directory, recorded = planned(sweep, name, resume)

    def check(cell: PlannedCell) -> Any:  # the cell's launch plan as a job (missing inputs: warnings here)
        words, resume_dir = plan.launch_words(cell)
        return plan_launch(
            [*words, BACKEND_WORD], resume=resume_dir, name=cell.name, launching=False, site=options
        )

    print(checking_line(plan), file=sys.stderr, flush=True)
    if dry_run:
        checked = check_cells(plan, directory, check, retry_failed=retry_failed)
        script = _script(plan.name, directory, checked, options)
        print(script or f"zerolab sweep {plan.name}: no cell to run\n", end="")
        return 0
    with checked_and_locked(plan, directory, check, retry_failed=retry_failed) as checked:
        script = _script(plan.name, directory, checked, options)
        if not recorded:
            write_plan(directory, plan)
        for item in checked:
            if item.action == REFUSE:
                record_refusal(directory, item)
                print(f"zerolab: {item.cell.name} refused: {item.refusal}", file=sys.stderr)
        if script is None:
            print(f"zerolab sweep {plan.name}: no cell left to run (see {display_path(directory)}/)")
            return 0
        path = directory / SBATCH_FILE
        write_atomic(path, script, mode=0o755)
    runs = [item for item in checked if item.action == RUN]
    print(
        f"wrote {display_path(path)}: {len(runs)} array task(s), one per cell to run; submit it from "
        f"this directory: sbatch {display_path(path)}; then: zerolab summarize {display_path(directory)}"
    )
    return 0


def _script(name: str, directory: Path, checked: list[Checked], options: Any) -> str | None:
    """The array job of the cells to run (None when there is none)."""

    tasks = [
        ArrayTask(
            item.ready.recipe,
            item.ready.launch,
            display_path(cell_dir(directory, item.cell)),
            previous_prefix(directory, item.cell),
            item.ready.resume,
        )
        for item in checked
        if item.action == RUN
    ]
    return sbatch_array(tasks, name, options, rendered_by=RENDERED_BY) if tasks else None
