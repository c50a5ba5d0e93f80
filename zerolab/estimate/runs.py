"""The estimate for a run that has happened: from its run directory's resolved recipe.yaml, or
from a plain log's argument dump. Used by `zerolab summarize` to put the estimate next to the
measured max allocated."""

from __future__ import annotations

from pathlib import Path

from zerolab.errors import UserError
from zerolab.estimate import CannotEstimate, estimate
from zerolab.estimate.from_log import recipe_from_log
from zerolab.logs.parse import ParsedLog
from zerolab.recipe.compose import load_recipe
from zerolab.rundir import RECIPE_FILE, whole_recipe


def estimated_peak_gib(run_dir: Path | None, log: ParsedLog) -> tuple[float | None, str | None]:
    """(predicted peak allocated GiB, None), or (None, why there is no estimate)."""

    if run_dir is not None and (run_dir / RECIPE_FILE).is_file():
        try:
            recipe = load_recipe(whole_recipe(run_dir))
        except UserError as error:
            return None, f"{RECIPE_FILE} does not load: {str(error).splitlines()[0]}"
    else:
        recipe, reasons = recipe_from_log(log)
        if recipe is None:
            return None, "; ".join(reasons)
    if recipe.hardware.device == "cpu":
        return None, "a CPU run: its max allocated is resident memory, not comparable with the estimate"
    try:
        return estimate(recipe).gpu_peak_gib, None
    except CannotEstimate as error:
        return None, str(error)
