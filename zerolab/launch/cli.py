"""`zerolab launch RECIPE [KEY=VALUE...] [--dry-run] [--resume RUN_DIR]` (also recipes/NAME.sh)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from zerolab.errors import UserError


def register(subparsers: Any) -> None:
    """Add `zerolab launch`."""
    description = (
        "Check a recipe and its inputs, then train: creates logs/NAME/YYYYmmdd-HHMMSS/ (recipe.yaml, "
        "ds_config.json, command.sh, doctor.json, run.json, train.log, samples.csv, status.json), "
        "streams every rank's output, and exits with the training's exit code."
    )
    parser = subparsers.add_parser("launch", help="check and launch a recipe", description=description)
    parser.add_argument(
        "words",
        nargs="*",
        metavar="RECIPE [KEY=VALUE ...]",
        help="recipe file or name under recipes/ (cpu/tiny_z1), then overrides (train.iters=100); "
        "with --resume, only overrides",
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="print the command and DeepSpeed config, write nothing"
    )
    parser.add_argument(
        "--resume",
        type=Path,
        metavar="RUN_DIR",
        help="continue the run in RUN_DIR from its last checkpoint, into a new run directory",
    )
    parser.add_argument(
        "--run-dir", type=Path, help="write the run here instead of logs/NAME/TIMESTAMP (must not exist)"
    )
    parser.set_defaults(run=run_launch)


def run_launch(args: argparse.Namespace) -> int:
    """Launch (or, with --dry-run, print) a recipe; returns the training's exit code."""
    from zerolab.launch.launcher import launch, prepare

    words = list(args.words)
    if args.resume is None and not words:
        raise UserError(
            "give a RECIPE (a file, or a name under recipes/ such as cpu/tiny_z1) or --resume RUN_DIR"
        )
    spec = None if args.resume is not None else words.pop(0)
    if args.dry_run:
        return dry_run(spec, words, args.resume)
    prepared = prepare(spec, words, resume=args.resume)
    _, status = launch(prepared, run_dir=args.run_dir)
    return int(status["exit_code"])


def dry_run(spec: str | None, overrides: list[str], resume: Path | None) -> int:
    """Print the render of the recipe (missing inputs as warnings); write nothing."""
    from zerolab.launch import rundir
    from zerolab.recipe import load_recipe, render
    from zerolab.recipe.extras import check_extras
    from zerolab.recipe.output import render_text, warn_missing_inputs

    recipe = load_recipe(resume / rundir.RECIPE_FILE if resume else spec, overrides)
    warn_missing_inputs(recipe)
    launch = render(recipe)
    check_extras(recipe, launch, required=False)
    print(render_text(recipe, launch), end="")
    return 0
