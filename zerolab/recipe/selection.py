"""What a command renders or launches: a recipe with its overrides, or the run to continue
(`--resume RUN_DIR`: its resolved recipe with the overrides on top, under the run's name with
the overrides in it, refused when the checkpoint cannot carry it)."""

from __future__ import annotations

import shlex
from pathlib import Path

from zerolab import rundir
from zerolab.errors import UserError
from zerolab.recipe.compose import load_recipe
from zerolab.recipe.naming import renamed
from zerolab.recipe.resumption import Resume, change_of, resume_problems
from zerolab.recipe.schema import Recipe
from zerolab.recipe.yaml_io import read_yaml_mapping

GIVE_A_RECIPE = "give a RECIPE (a file, or a name under recipes/ such as cpu/tiny_z1) or --resume RUN_DIR"


def resumed_recipe_file(resume: Path) -> Path:
    """The recipe.yaml of the run that --resume `resume` continues; UserError saying what the path
    is instead (no such folder, a file, a folder without one), or that its recipe.yaml is cut short."""
    recipe_file = rundir.whole_recipe(resume)
    if recipe_file.is_file():
        return recipe_file
    if not resume.exists():
        why = f"no such folder ({resume.absolute()} does not exist)"
    elif not resume.is_dir():
        why = "a file, not a run directory"
    else:
        why = f"not a run directory (no {rundir.RECIPE_FILE})"
    raise UserError(f"--resume {resume}: {why}; give a run directory zerolab launch wrote (logs/NAME/STAMP)")


def select(words: list[str], resume: Path | None, *, name: str | None = None) -> tuple[Recipe, Resume | None]:
    """The recipe of `words` (RECIPE then KEY=VALUE overrides), named `name` instead of the recipe
    file when given, or with `resume` the recipe of that run (under its name) with `words` as
    overrides and what it resumes from."""
    if resume is None:
        if not words:
            raise UserError(GIVE_A_RECIPE)
        recipe = load_recipe(words[0], words[1:], name=name)
        return recipe, None
    recipe_file = resumed_recipe_file(resume)
    if read_yaml_mapping(recipe_file).get("finetune") is not None:
        raise UserError(
            f"--resume {resume}: a fine-tuning run saves no checkpoint and is not resumed; launch its "
            f"recipe again: zerolab launch {recipe_file}"
        )
    checkpoint = rundir.last_checkpoint(resume)
    if checkpoint is None:
        latest = f"{rundir.CHECKPOINTS_DIR}/{rundir.LATEST_CHECKPOINT}"
        if (resume / latest).is_file():
            raise UserError(
                f"{resume}: no checkpoint to resume from ({latest} holds no iteration number: cut short?); "
                "write the iteration of its last checkpoints/global_stepN folder into it, or launch anew"
            )
        raise UserError(
            f"{resume}: no checkpoint to resume from ({latest} is missing); launch with "
            "train.save_interval=N to save checkpoints"
        )
    name = renamed(rundir.run_name(resume), words)
    facts, _ = rundir.read_facts(resume)
    path = facts.recipe if facts else None  # the recipe file the run was launched from
    previous = load_recipe(recipe_file, name=name, path_shown=path)
    recipe = load_recipe(recipe_file, words, name=name, path_shown=path)
    new_run = shlex.join(["zerolab", "launch", str(recipe_file), *words])
    problems = resume_problems(previous, recipe, checkpoint, new_run)
    if problems:
        raise UserError(
            f"--resume {resume}: cannot continue its checkpoint at iteration {checkpoint}:\n"
            + "\n".join(f"- {problem}" for problem in problems)
        )
    return recipe, Resume(resume, previous, checkpoint, universal=change_of(previous, recipe) is not None)
