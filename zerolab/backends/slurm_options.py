"""The --slurm options of `zerolab render`, `launch` and `sweep` (--slurm: hardware.backend=slurm), and
the SlurmOptions they give."""

from __future__ import annotations

import argparse

from zerolab.backends.slurm_script import SlurmOptions
from zerolab.errors import UserError


def add_slurm_arguments(parser: argparse.ArgumentParser, slurm_help: str) -> None:
    """--slurm (with `slurm_help`) and the site options that go with it."""
    parser.add_argument("--slurm", action="store_true", help=slurm_help)
    parser.add_argument(
        "--image",
        help="with --slurm: the container image pyxis runs on each node (default: the hosts' engine)",
    )
    parser.add_argument("--partition", help="with --slurm: #SBATCH --partition")
    parser.add_argument("--account", help="with --slurm: #SBATCH --account")
    parser.add_argument("--time", default="02:00:00", help="with --slurm: #SBATCH --time (default 02:00:00)")


BACKEND_WORD = "hardware.backend=slurm"
"""What --slurm stands for: the recipe's backend set to slurm, as the last override."""


def backend_words(args: argparse.Namespace) -> list[str]:
    """The command's recipe words, with BACKEND_WORD after them when --slurm is given."""
    return [*args.words, BACKEND_WORD] if args.slurm else list(args.words)


def site_options(args: argparse.Namespace) -> SlurmOptions | None:
    """The SlurmOptions --slurm's site options give (without --image, the jobs run this machine's
    engine set-up and this checkout); None without --slurm. UserError when --image, --partition or
    --account is given without --slurm."""
    given = [option for option in ("image", "partition", "account") if getattr(args, option)]
    if not args.slurm:
        if given:
            raise UserError(f"--{given[0]} is an option of --slurm; add --slurm, or leave it out")
        return None
    return SlurmOptions(
        image=args.image,
        partition=args.partition,
        account=args.account,
        time_limit=args.time,
    )
