"""`zerolab sweep RECIPE KEY=V1,V2,... [KEY=VALUE ...]` (docs/sweep.md)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from rich.console import Console

from zerolab.backends.slurm_options import add_slurm_arguments, site_options
from zerolab.errors import UserError
from zerolab.recipe.selection import resumed_recipe_file
from zerolab.summarize.report import summarize_sweep
from zerolab.sweep.array import write_array_job
from zerolab.sweep.cells import cells_of, check_name, read_words
from zerolab.sweep.plan import read_plan
from zerolab.sweep.run import dry_run
from zerolab.sweep.run import run_sweep as run_sweep_cells
from zerolab.sweep.size import LARGE, confirm_size, count_text


def register(subparsers: Any) -> None:
    """Add `zerolab sweep`."""
    description = (
        "Run a recipe once per combination of swept values, each into its own run directory under "
        "logs/sweeps/NAME/, then summarize them with the swept keys as columns and a plot of each metric "
        "against each swept key. KEY=V1,V2,... sweeps a key (values split at top-level commas; quote a "
        "value that holds commas: \"data.split='98,2,0'\"), KEY=VALUE is a fixed override of every cell. "
        "Running the same command again resumes: completed cells are skipped. A sweep of more than "
        f"{LARGE} cells asks first (--yes). Exit status: 0 when every cell that could run completed, 1 "
        "when one failed, 2 for bad input or every cell refused (the dry run too), 130 when stopped by "
        "Ctrl-C."
    )
    parser = subparsers.add_parser(
        "sweep",
        help="run a recipe over swept values",
        description=description,
        usage="zerolab sweep RECIPE KEY=V1,V2,... [KEY=VALUE ...] [--dry-run [--count]] [--yes] "
        "[--resume RUN_DIR (then no RECIPE)] "
        "[--name NAME] [--retry-failed] [--slurm [--image IMAGE] [--partition P] [--account A] [--time T]]",
    )
    parser.add_argument(
        "words",
        nargs="*",
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
        "--count",
        action="store_true",
        help="with --dry-run: only print how many cells the sweep has; check nothing, write nothing",
    )
    parser.add_argument(
        "--yes",
        "-y",
        action="store_true",
        help=f"check and run (or list) a sweep of more than {LARGE} cells without asking",
    )
    parser.add_argument(
        "--name", help="the sweep's name, its directory logs/sweeps/NAME (default: RECIPE-KEY-...)"
    )
    parser.add_argument(
        "--resume",
        metavar="RUN_DIR",
        type=Path,
        help="every cell continues the last checkpoint of the run in RUN_DIR under its own setup (the "
        "study at equal starting loss; docs/resume.md says which setup changes the engine carries): "
        "the words are then only KEY=... overrides of that run's recipe",
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

    site = site_options(args)
    if args.count and not args.dry_run:
        raise UserError("--count goes with --dry-run: zerolab sweep RECIPE KEY=V1,V2,... --dry-run --count")
    resume = args.resume
    if resume is None:
        if not args.words:
            raise UserError(
                "give a RECIPE and at least one KEY=V1,V2,...: zerolab sweep RECIPE KEY=V1,V2,... "
                "(e.g. zerolab sweep cpu/tiny_z1 zero=z1,z2,z3), or continue a run's checkpoint under "
                "each value: zerolab sweep --resume RUN_DIR KEY=V1,V2,..."
            )
        words = read_words(args.words[0], args.words[1:])
    else:
        words = read_words(str(resumed_recipe(resume, args.words)), args.words)
    name = check_name(args.name) if args.name is not None else None
    if args.count:
        print(count_text(words, name or words.default_name()), end="")
        return 0
    doing = (
        "check and list"
        if args.dry_run
        else "check and write an array job of"
        if args.slurm
        else "check and run"
    )
    confirm_size(words, yes=args.yes, doing=doing)
    sweep = cells_of(words)
    if args.slurm:
        return write_array_job(
            sweep, name, retry_failed=args.retry_failed, options=site, dry_run=args.dry_run, resume=resume
        )
    if args.dry_run:
        return dry_run(sweep, name, retry_failed=args.retry_failed, resume=resume)
    console = Console(highlight=False)
    ran = run_sweep_cells(sweep, name, retry_failed=args.retry_failed, console=console, resume=resume)
    if ran.ended:
        summarize_sweep(ran.directory)
    return ran.exit_code


def resumed_recipe(resume: Path, words: list[str]) -> Path:
    """The recipe every cell of a sweep continuing `resume` starts from: the run's own, whose
    overrides the words are (a RECIPE word is refused, as `zerolab launch --resume` takes none, and
    so are no words: nothing to sweep). A sweep's directory given for a run's is told apart: the
    same sweep command goes on with it."""
    plan, _ = read_plan(resume)
    if plan is not None:
        raise UserError(
            f"--resume {resume}: a sweep's directory, not a run directory (--resume continues one run's "
            f"checkpoint); to go on with that sweep, run its command again (completed cells are "
            f"skipped): {plan.command()}"
        )
    recipe = resumed_recipe_file(resume)
    if not words:
        raise UserError(
            f"--resume {resume}: nothing to sweep; give at least one KEY=V1,V2,... whose cells each "
            f"continue that run's checkpoint (e.g. zerolab sweep --resume {resume} zero=z1,z2), or "
            f"continue it once: zerolab launch --resume {resume}"
        )
    if words and "=" not in words[0]:
        raise UserError(
            f"--resume {resume}: the cells continue that run's recipe ({recipe}); give only KEY=V1,V2,... "
            f"and KEY=VALUE words, not the recipe `{words[0]}`"
        )
    return recipe
