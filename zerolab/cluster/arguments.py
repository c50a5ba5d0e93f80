"""The --slurm options of `zerolab render` and `zerolab sweep`, and the SlurmOptions they give."""

from __future__ import annotations

import argparse
from typing import Any

from zerolab.cluster.slurm import SlurmOptions
from zerolab.engine.paths import engine_python
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


def refuse_slurm_options_without_slurm(args: argparse.Namespace) -> None:
    """UserError when --image, --partition or --account is given without --slurm."""
    given = [option for option in ("image", "partition", "account") if getattr(args, option)]
    if given and not args.slurm:
        raise UserError(f"--{given[0]} is an option of --slurm; add --slurm, or leave it out")


def slurm_options(args: argparse.Namespace) -> Any:
    """The SlurmOptions the arguments give; without --image, the jobs run this engine's bin directory."""

    return SlurmOptions(
        image=args.image,
        partition=args.partition,
        account=args.account,
        time_limit=args.time,
        engine_bin=None if args.image else str(engine_python().parent),
    )
