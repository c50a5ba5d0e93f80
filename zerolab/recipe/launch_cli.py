"""`zerolab launch RECIPE [overrides] [--dry-run]`. The dry run prints the render; the
launch itself belongs to the engine part, which replaces this module's `run_launch`."""

from __future__ import annotations

import argparse
from typing import Any

from zerolab.errors import UserError
from zerolab.recipe.cli import add_recipe_parser


def register(subparsers: Any) -> None:
    """Add `launch`."""
    parser = add_recipe_parser(subparsers, "launch", "check, render and launch a recipe")
    parser.add_argument(
        "--dry-run", action="store_true", help="print the command and DeepSpeed config, launch nothing"
    )
    parser.set_defaults(run=run_launch)


def run_launch(args: argparse.Namespace) -> int:
    """Dry run: print the render. Otherwise refuse: launching needs the engine part."""
    from zerolab.recipe import check_inputs, load_recipe, render
    from zerolab.recipe.output import render_text, warn_missing_inputs

    recipe = load_recipe(args.recipe, args.overrides)
    launch = render(recipe)
    if args.dry_run:
        warn_missing_inputs(recipe)
        print(render_text(recipe, launch), end="")
        return 0
    problems = check_inputs(recipe)
    if problems:
        raise UserError(
            "cannot launch, inputs missing:\n" + "\n".join(f"- {problem}" for problem in problems)
        )
    raise UserError(
        "launching needs the engine part (zerolab.engine), which this checkout does not have yet; "
        "use --dry-run"
    )
