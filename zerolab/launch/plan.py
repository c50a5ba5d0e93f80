"""`plan`: the one step before any launch. Recipe words become a checked recipe, its backend
(hardware.backend), the backend's refusals, the run directory and rendezvous port decided, one
render, the engine's judgement of its extras and the memory estimate's warning. `zerolab render`,
`zerolab launch` (its dry run, --slurm), sweep cells, array jobs and fine-tuning all plan this
way, and differ only in what they do with the plan: print its job, or run it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from zerolab.backends.base import LaunchPlan
from zerolab.backends.registry import backend_named
from zerolab.errors import UserError
from zerolab.estimate.gpu import warn_before_launch
from zerolab.locations import LOGS_DIR
from zerolab.recipe.compose import RecipeProblems
from zerolab.recipe.extras import check_extras
from zerolab.recipe.facts import run_facts
from zerolab.recipe.job import check_inputs, refuse_missing_inputs
from zerolab.recipe.output import warn_missing_inputs
from zerolab.recipe.render import RUN_DIR_PLACEHOLDER
from zerolab.recipe.resumption import resumed_facts
from zerolab.recipe.schema import DEFAULT_MASTER_PORT
from zerolab.recipe.selection import select


def plan(
    words: list[str],
    *,
    resume: Path | None = None,
    name: str | None = None,
    launching: bool = True,
    engine_required: bool = True,
    run_dir: Path | None = None,
    logs_root: Path = LOGS_DIR,
    site: Any = None,
) -> LaunchPlan:
    """The launch of RECIPE then KEY=VALUE `words` (with `resume`: the resumed run's recipe, the
    words as overrides), named `name` instead of the recipe file (a sweep's cell), run by the
    backend hardware.backend names (made with the command's `site` options), rendered once.

    `launching` (launch, a sweep, submitting a job): every problem, the backend's included, is one
    UserError before anything is written; the run directory (`run_dir`, else a new one under
    `logs_root`) and a free rendezvous port are decided before the render, and the memory estimate
    warns when it exceeds the GPU's. Otherwise (render, a dry run) missing inputs are warnings and
    the render writes into `run_dir`, else `${RUN_DIR}`. Without `engine_required`, a missing
    engine is no problem and the extras it would judge are left unjudged, with a warning."""

    try:
        recipe, resumption = select(words, resume, name=name)
    except RecipeProblems as refused:  # named together with what else keeps it from launching here
        if not launching:
            raise
        backend = backend_named(refused.recipe.hardware.backend, site)
        more = backend.problems(refused.recipe, engine_required=engine_required)
        raise refused.adding([*more, *check_inputs(refused.recipe)]) from None
    backend = backend_named(recipe.hardware.backend, site)
    if launching:
        problems = backend.problems(recipe, engine_required=engine_required)
        if problems:
            problems += check_inputs(recipe)
            listed = "\n".join(f"- {problem}" for problem in problems)
            raise UserError(
                f"cannot launch {recipe.name}: {len(problems)} problem(s) found before launch:\n{listed}"
            )
        refuse_missing_inputs(recipe, "launch")
        directory = backend.run_dir(recipe.name, logs_root=logs_root, given=run_dir)
        launched = backend.launched(recipe)
    else:
        warn_missing_inputs(recipe)
        directory, launched = run_dir, recipe
    rendered = backend.render(
        launched, run_dir=str(directory) if directory is not None else RUN_DIR_PLACEHOLDER, resume=resumption
    )
    check_extras(recipe, rendered, required=launching and engine_required)
    port = launched.hardware.master_port or DEFAULT_MASTER_PORT
    facts = run_facts(launched).model_copy(update={"master_port": port, **resumed_facts(resumption)})
    if launching:
        warn_before_launch(recipe)
    return LaunchPlan(recipe, rendered, facts, backend, resumption, directory)
