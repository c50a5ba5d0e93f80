"""`zerolab launch RECIPE [KEY=VALUE...] [--dry-run] [--resume RUN_DIR]` (also recipes/NAME.sh)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from zerolab.launch.launcher import launch, prepare
from zerolab.recipe import render
from zerolab.recipe.extras import check_extras
from zerolab.recipe.output import render_text, warn_missing_inputs
from zerolab.recipe.render import RUN_DIR_PLACEHOLDER
from zerolab.recipe.selection import select


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

    if args.dry_run:
        return dry_run(list(args.words), args.resume, args.run_dir)
    prepared = prepare(list(args.words), resume=args.resume)
    _, status = launch(prepared, run_dir=args.run_dir)
    return int(status.exit_code or 0)


def dry_run(words: list[str], resume: Path | None, run_dir: Path | None) -> int:
    """Print what the launch would run (missing inputs as warnings); write nothing."""

    recipe, resumption = select(words, resume)
    warn_missing_inputs(recipe)
    launch = render(recipe, run_dir=str(run_dir) if run_dir else RUN_DIR_PLACEHOLDER, resume=resumption)
    check_extras(recipe, launch, required=False)
    print(render_text(recipe, launch), end="")
    return 0
