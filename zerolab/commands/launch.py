"""`zerolab launch RECIPE [KEY=VALUE...] [--dry-run] [--resume RUN_DIR] [--slurm ...]` (also
recipes/NAME.sh): the recipe's launch plan (zerolab.launch.plan), printed (--dry-run) or run by
its backend (hardware.backend; --slurm is hardware.backend=slurm)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from zerolab.backends.driver import run
from zerolab.backends.slurm_options import add_slurm_arguments, backend_words, site_options
from zerolab.errors import UserError
from zerolab.launch.plan import plan


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
        "hardware.backend=slurm: submit the recipe as a SLURM job (the script of `zerolab render --slurm`) "
        "from this login node, follow it to its end and record it in logs/NAME/slurm-JOBID/ "
        "(docs/multinode.md); Ctrl-C cancels it",
    )
    parser.set_defaults(run=run_launch)


def run_launch(args: argparse.Namespace) -> int:
    """Launch (or, with --dry-run, print) a recipe; returns the training's exit code."""

    site = site_options(args)
    if args.slurm and args.run_dir is not None:
        raise UserError("--run-dir is not an option of --slurm: the job writes logs/NAME/slurm-JOBID/")
    words = backend_words(args)
    if args.dry_run:
        planned = plan(words, resume=args.resume, run_dir=args.run_dir, launching=False, site=site)
        print(planned.backend.job(planned), end="")
        return 0
    planned = plan(words, resume=args.resume, run_dir=args.run_dir, site=site)
    if args.run_dir is not None and planned.run_dir is None:
        raise UserError(
            f"--run-dir is not an option of hardware.backend {planned.backend.name}: the job makes its own"
        )
    _, status = run(planned)
    return int(status.exit_code or 0)
