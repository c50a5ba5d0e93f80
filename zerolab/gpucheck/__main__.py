"""`make gpu-check` (`python3 -m zerolab.gpucheck`): the GPU check, run by the machine's own
Python (the one with its CUDA torch), offline with a kit (`make gpu-kit` on a machine with network
access). `--dry-run` prints each step's commands and runs nothing."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from zerolab.engine.paths import zerolab_home
from zerolab.errors import UserError
from zerolab.gpucheck.check import (
    MIN_ITERS,
    STEP_NAMES,
    Options,
    check_home,
    machine_problems,
    machine_python,
    run,
)
from zerolab.gpucheck.kit import read_kit


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="make gpu-check", description=__doc__.split("\n\n")[0])
    parser.add_argument("--kit", type=Path, help="the kit `make gpu-kit` gathered (offline machines)")
    parser.add_argument("--results", type=Path, help="also copy gpu.md, the plots and the runs' tarball here")
    parser.add_argument("--iters", type=int, default=30, help="training iterations per run (default 30)")
    parser.add_argument("--data", help="a prepared dataset prefix (default: the bundled dolly sample)")
    parser.add_argument(
        "--only", help=f"run these steps (comma-separated, again if done before): {', '.join(STEP_NAMES)}"
    )
    parser.add_argument("--dry-run", action="store_true", help="print each step's commands; run nothing")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Run the GPU check; bad input exits 2 with the reason."""
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
        kit = read_kit(args.kit.resolve()) if args.kit else None
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
    )
    problems = machine_problems()
    for problem in problems:
        print(f"{'note' if args.dry_run else 'zerolab: error'}: {problem}", file=sys.stderr)
    if problems and not args.dry_run:
        return 2
    return run(options, only=only, dry_run=args.dry_run)


if __name__ == "__main__":
    sys.exit(main())
