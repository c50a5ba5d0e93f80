"""`zerolab sweep RECIPE KEY=V1,V2,... [KEY=VALUE ...]` (docs/sweep.md)."""

from __future__ import annotations

import argparse
from typing import Any

from rich.console import Console

from zerolab.cluster.arguments import add_slurm_arguments, refuse_slurm_options_without_slurm, slurm_options
from zerolab.summarize.report import summarize_sweep
from zerolab.sweep.array import write_array_job
from zerolab.sweep.cells import check_name, expand
from zerolab.sweep.run import dry_run
from zerolab.sweep.run import run_sweep as run_sweep_cells


def register(subparsers: Any) -> None:
    """Add `zerolab sweep`."""
    description = (
        "Run a recipe once per combination of swept values, each into its own run directory under "
        "logs/sweeps/NAME/, then summarize them with the swept keys as columns and a plot of each metric "
        "against each swept key. KEY=V1,V2,... sweeps a key (values split at top-level commas; quote a "
        "value that holds commas: \"data.split='98,2,0'\"), KEY=VALUE is a fixed override of every cell. "
        "Running the same command again resumes: completed cells are skipped. Exit status: 0 when every "
        "cell that could run completed, 1 when one failed, 2 for bad input, 130 when stopped by Ctrl-C."
    )
    parser = subparsers.add_parser(
        "sweep",
        help="run a recipe over swept values",
        description=description,
        usage="zerolab sweep RECIPE KEY=V1,V2,... [KEY=VALUE ...] [--dry-run] [--name NAME] "
        "[--retry-failed] [--slurm [--image IMAGE] [--partition P] [--account A] [--time T]]",
    )
    parser.add_argument(
        "words",
        nargs="+",
        metavar="RECIPE",
        help="recipe file or name under recipes/, then swept keys (zero=z0,z1,z2, "
        "train.micro_batch_size=1,2,4) and fixed overrides (train.iters=50)",
    )
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="list the cells and their checks (ok or refused); write nothing",
    )
    parser.add_argument(
        "--name", help="the sweep's name, its directory logs/sweeps/NAME (default: RECIPE-KEY-...)"
    )
    parser.add_argument(
        "--retry-failed",
        action="store_true",
        help="run the cells that failed earlier again (skipped otherwise)",
    )
    add_slurm_arguments(
        parser,
        "write one sbatch array job (logs/sweeps/NAME/sweep.sbatch, one task per cell) instead of running",
    )
    parser.set_defaults(run=run_sweep)


def run_sweep(args: argparse.Namespace) -> int:
    """Expand the sweep, then list (--dry-run), write the array job (--slurm) or run its cells."""

    refuse_slurm_options_without_slurm(args)
    sweep = expand(args.words[0], args.words[1:])
    name = check_name(args.name) if args.name is not None else None
    if args.slurm:
        return write_array_job(
            sweep, name, retry_failed=args.retry_failed, options=slurm_options(args), dry_run=args.dry_run
        )
    if args.dry_run:
        return dry_run(sweep, name, retry_failed=args.retry_failed)
    ran = run_sweep_cells(sweep, name, retry_failed=args.retry_failed, console=Console(highlight=False))
    if ran.ended:
        summarize_sweep(ran.directory)
    return ran.exit_code
