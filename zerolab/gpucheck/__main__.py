"""`make gpu-check` (`python3 -m zerolab.gpucheck`): the GPU check, run by the machine's own
Python (the one with its CUDA torch), offline with a kit (`make gpu-kit` on a machine with network
access). `--dry-run` prints each step's commands and runs nothing."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from zerolab.contracts import LockHeld, holding
from zerolab.data_prep.folders import check_folder
from zerolab.data_prep.indexed import dataset_problems
from zerolab.engine.paths import zerolab_home
from zerolab.errors import UserError, interrupted_line
from zerolab.gpucheck.check import (
    DEFAULT_BUDGET_S,
    LOCK_FILE,
    MIN_ITERS,
    PLANNED,
    STEP_NAMES,
    Options,
    check_home,
    machine_problems,
    machine_python,
    run,
)
from zerolab.gpucheck.kit import read_kit
from zerolab.gpucheck.report import write_report
from zerolab.locations import REPO_ROOT


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="make gpu-check", description=__doc__.split("\n\n")[0])
    parser.add_argument("--kit", type=Path, help="the kit `make gpu-kit` gathered (offline machines)")
    parser.add_argument("--results", type=Path, help="also copy gpu.md, the plots and the runs' tarball here")
    parser.add_argument(
        "--iters", type=int, default=MIN_ITERS, help=f"iterations per seed run (default {MIN_ITERS})"
    )
    parser.add_argument("--data", help="a prepared dataset prefix (default: the bundled dolly sample)")
    parser.add_argument(
        "--only",
        help=f"run these steps (comma-separated, again if done before): {', '.join(STEP_NAMES)}; "
        f"default: {', '.join(PLANNED)}",
    )
    parser.add_argument(
        "--budget",
        type=float,
        default=DEFAULT_BUDGET_S,
        metavar="SECONDS",
        help=f"the check's wall time (default {DEFAULT_BUDGET_S}): a step that no longer fits is not started",
    )
    parser.add_argument(
        "--rehearse",
        action="store_true",
        help="run the plan on this machine's CPU with the tiny GPT-2 and this machine's engine set-up "
        "(logs/gpu-check-rehearsal), each step's time recorded",
    )
    parser.add_argument(
        "--work",
        type=Path,
        help="the check's folder (default logs/gpu-check, a rehearsal's logs/gpu-check-rehearsal)",
    )
    parser.add_argument(
        "--cuda-builds",
        action="store_true",
        help="also build apex and the fused kernels (a kit made with --apex)",
    )
    parser.add_argument("--dry-run", action="store_true", help="print each step's commands; run nothing")
    return parser.parse_args(argv)


def check_paths(args: argparse.Namespace) -> None:
    """UserError, before any step starts, for a folder option that names a file and a --data prefix
    that is not a prepared dataset (the steps would each fail on it, minutes in)."""
    for option, folder, what in (
        ("--work", args.work, "the check's folder"),
        ("--results", args.results, "the results folder"),
    ):
        if folder is not None:
            check_folder(folder, what, option)
    if args.data:
        _, problems = dataset_problems(Path(args.data))
        if problems:
            raise UserError(
                f"--data {args.data}: {problems[0]}; give the prefix of a prepared dataset (`zerolab prep "
                "... --out PREFIX` writes PREFIX.bin and PREFIX.idx), or leave --data out for the bundled "
                "dolly sample"
            )


def main(argv: list[str] | None = None) -> int:
    """Run the GPU check; bad input exits 2 with the reason, Ctrl-C 130 with one line saying what a
    rerun goes on from (no traceback)."""
    try:
        return check(argv)
    except KeyboardInterrupt as stop:
        print(interrupted_line(stop), file=sys.stderr)
        return 130


def check(argv: list[str] | None) -> int:
    """The GPU check of `main`."""
    args = parse(argv)
    try:
        only = args.only.split(",") if args.only else None
        unknown = sorted(set(only or ()) - set(STEP_NAMES))
        if unknown:
            raise UserError(
                f"--only {args.only}: no step {', '.join(unknown)}; the steps: {', '.join(STEP_NAMES)}"
            )
        if args.iters < MIN_ITERS:
            raise UserError(
                f"--iters {args.iters}: at least {MIN_ITERS}, for a steady state after the seed recipes' "
                "learning-rate warm-up"
            )
        if args.budget <= 0:
            raise UserError(f"--budget {args.budget:g}: the check's wall time in seconds, more than 0")
        check_paths(args)
        kit = read_kit(args.kit.resolve()) if args.kit else None
        if not args.rehearse:
            check_home(zerolab_home())
    except UserError as error:
        print(f"zerolab: error: {error}", file=sys.stderr)
        return 2

    options = Options(
        kit=kit,
        python=machine_python(),
        iters=args.iters,
        data=args.data,
        results=args.results.resolve() if args.results else None,
        home=zerolab_home(),
        budget_s=args.budget,
        rehearse=args.rehearse,
        cuda_builds=args.cuda_builds,
        work_dir=args.work,
    )
    problems = [] if args.rehearse else machine_problems()
    for problem in problems:
        print(f"{'note' if args.dry_run else 'zerolab: error'}: {problem}", file=sys.stderr)
    if problems and not args.dry_run:
        return 2
    if args.dry_run:
        return run(options, only=only, dry_run=True)
    return run_held(options, only)


def run_held(options: Options, only: list[str] | None) -> int:
    """Run the check holding its folder's lock (a second check there is refused, naming the first:
    both would run the same steps into the same folders)."""
    folder = REPO_ROOT / options.work
    folder.mkdir(parents=True, exist_ok=True)
    try:
        with holding(folder / LOCK_FILE, f"make gpu-check{' --rehearse' if options.rehearse else ''}"):
            return run(
                options,
                only=only,
                dry_run=False,
                after_step=lambda: write_report(options.work, options.results),
            )
    except LockHeld as held:
        print(
            f"zerolab: error: another GPU check is running in {options.work} ({held.holder}); wait for it, "
            "or stop it (Ctrl-C in its terminal), or give this one another --work",
            file=sys.stderr,
        )
        return 2


if __name__ == "__main__":
    sys.exit(main())
