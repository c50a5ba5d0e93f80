"""`zerolab estimate RECIPE [KEY=VALUE ...] [--gpu-memory GIB] [--plot PNG] [--link-gbps GBPS]
[--json]`: exit 0 with the estimate, 2 for bad input, 3 when the recipe has settings the
estimator does not model (it names them rather than guess)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from rich.console import Console

from zerolab.commands.recipe import add_recipe_parser
from zerolab.errors import UserError
from zerolab.estimate import CannotEstimate, estimate
from zerolab.estimate.communication import NVLINK_GBPS, PCIE_GBPS
from zerolab.estimate.fit import fit_table
from zerolab.estimate.output import (
    as_json,
    fit_grid,
    gpu_table,
    header,
    host_table,
    traffic_tables,
    unestimable_json,
)
from zerolab.estimate.plot import write_fit_plot
from zerolab.recipe.compose import load_recipe

CANNOT_ESTIMATE = 3


def _positive(what: str) -> Any:
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = -1.0
        if not value > 0:
            raise argparse.ArgumentTypeError(f"{text!r} is not a positive number of {what}")
        return value

    return parse


def register(subparsers: Any) -> None:
    """Add `zerolab estimate`."""

    parser = add_recipe_parser(
        subparsers,
        "estimate",
        "what a recipe's setup will cost in GPU and host memory, and move between GPUs, before anything runs",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of tables")
    parser.add_argument(
        "--gpu-memory",
        type=_positive("GiB"),
        metavar="GIB",
        help="also show which ZeRO setups and micro batches fit a GPU of this many GiB",
    )
    parser.add_argument(
        "--plot", type=Path, metavar="PNG", help="with --gpu-memory: also draw the fit table into this PNG"
    )
    parser.add_argument(
        "--link-gbps",
        type=_positive("Gb/s"),
        metavar="GBPS",
        help=f"also time the traffic at this GPU-to-GPU link rate, Gb/s each way (NVLink 4: {NVLINK_GBPS:g}, "
        f"PCIe Gen5 x16: {PCIE_GBPS:g}, 400G InfiniBand: 400)",
    )
    parser.add_argument(
        "--host-link-gbps",
        type=_positive("Gb/s"),
        default=PCIE_GBPS,
        metavar="GBPS",
        help="the GPU-to-CPU link for offload traffic, Gb/s each way "
        f"(default: PCIe Gen5 x16, {PCIE_GBPS:g})",
    )
    parser.set_defaults(run=run_estimate)


def run_estimate(args: argparse.Namespace) -> int:
    """Print the estimate (and the fit table, and write the plot, when asked for)."""

    if args.plot is not None and args.gpu_memory is None:
        raise UserError("--plot draws the fit table: give --gpu-memory GIB too")
    if args.plot is not None and args.plot.suffix.lower() != ".png":
        raise UserError(f"--plot {args.plot}: give a file name ending in .png")
    recipe = load_recipe(args.recipe, args.overrides)
    try:
        est = estimate(recipe)
    except CannotEstimate as error:
        if args.json:
            print(json.dumps(unestimable_json(recipe, error.reasons), indent=2))
        else:
            print(
                f"zerolab: cannot estimate {recipe.path}: it has settings the estimator does not model:\n"
                + "\n".join(f"- {reason}" for reason in error.reasons)
                + "\n    fix: remove them to estimate the rest (docs/estimate.md lists what is modelled)",
                file=sys.stderr,
            )
        return CANNOT_ESTIMATE
    fit = fit_table(recipe, args.gpu_memory) if args.gpu_memory is not None else None
    if args.plot is not None and fit is not None:
        try:
            write_fit_plot(fit, recipe, args.plot)
        except OSError as error:
            raise UserError(f"--plot {args.plot}: cannot write it: {error.strerror or error}") from None
    if args.json:
        print(
            json.dumps(
                as_json(est, fit=fit, link_gbps=args.link_gbps, host_gbps=args.host_link_gbps), indent=2
            )
        )
        return 0
    _print_tables(est, fit, args)
    return 0


def _print_tables(est: Any, fit: Any, args: argparse.Namespace) -> None:

    console = Console() if sys.stdout.isatty() else Console(width=160)
    console.print(header(est), soft_wrap=True, highlight=False)
    console.print(gpu_table(est))
    console.print(host_table(est))
    for table in traffic_tables(est, args.link_gbps, args.host_link_gbps):
        console.print(table)
    if fit is not None:
        console.print(fit_grid(fit))
    if args.plot is not None:
        console.print(f"wrote {args.plot}", soft_wrap=True, highlight=False)
