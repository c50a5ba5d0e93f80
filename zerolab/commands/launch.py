"""`zerolab launch RECIPE [KEY=VALUE...] [--dry-run] [--resume RUN_DIR]` (also recipes/NAME.sh)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from zerolab.cluster.arguments import add_slurm_arguments, refuse_slurm_options_without_slurm, slurm_options
from zerolab.cluster.slurm import sbatch_for_recipe
from zerolab.errors import UserError
from zerolab.launch.launcher import launch, prepare
from zerolab.launch.slurm_job import submit_and_wait
from zerolab.recipe.extras import check_extras
from zerolab.recipe.job import refuse_missing_inputs
from zerolab.recipe.output import render_text, warn_missing_inputs
from zerolab.recipe.render import RUN_DIR_PLACEHOLDER, render
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
    add_slurm_arguments(
        parser,
        "submit the recipe as a SLURM job (the script of `zerolab render --slurm`) from this login node, "
        "follow it to its end and record it in logs/NAME/slurm-JOBID/ (docs/multinode.md); Ctrl-C cancels it",
    )
    parser.set_defaults(run=run_launch)


def run_launch(args: argparse.Namespace) -> int:
    """Launch (or, with --dry-run, print) a recipe; returns the training's exit code."""

    refuse_slurm_options_without_slurm(args)
    if args.slurm:
        return slurm_launch(args)
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


def slurm_launch(args: argparse.Namespace) -> int:
    """--slurm: check the recipe as a job runs it, then print (--dry-run) or submit its sbatch
    script and follow the job; returns the job's exit code."""

    if args.run_dir is not None:
        raise UserError("--run-dir is not an option of --slurm: the job writes logs/NAME/slurm-JOBID/")
    recipe, resume = select(list(args.words), args.resume, scheduler_places_nodes=True)
    options = slurm_options(args)
    script = sbatch_for_recipe(recipe, options, resume=resume)
    if args.dry_run:
        warn_missing_inputs(recipe, scheduler_places_nodes=True)
        print(script, end="")
        return 0
    refuse_missing_inputs(recipe, "submit", scheduler_places_nodes=True)
    directory, status = submit_and_wait(script, recipe.name, echo=_print)
    print(
        f"zerolab: {recipe.name} {status.state} (exit code {status.exit_code})"
        f"{': ' + status.cause if status.cause else ''}; run directory {directory}",
        flush=True,
    )
    return int(status.exit_code or 0)


def _print(text: str) -> None:
    print(text, end="", flush=True)
