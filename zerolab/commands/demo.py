"""`zerolab demo` (`make demo`): the seed study on CPU as one sweep. Prepares the bundled dolly-15k
sample, then sweeps the tiny GPT-2 over the five ZeRO setups (DP, ZeRO 1, 2, 3, 3 + CPU
offload), two ranks each, into logs/sweeps/demo/, summarized there side by side."""

from __future__ import annotations

import argparse
import time
from typing import Any

from rich.console import Console

from zerolab.commands.prep import run_prep
from zerolab.locations import SAMPLES_DIR, display_path
from zerolab.summarize.report import summarize_sweep
from zerolab.sweep.cells import check_name, expand
from zerolab.sweep.plan import sweep_dir
from zerolab.sweep.run import run_sweep

RECIPE = "cpu/tiny_dp"
SETUPS = ("zero=z0,z1,z2,z3,z3_offload", "zero.pin_memory=false")
"""The five setups: recipes/cpu/tiny_{dp,z1,z2,z3,z3_offload}.yaml differ only in their zero
block, and tiny_z3_offload also sets zero.pin_memory false (nothing to pin on a CPU machine; no
other setup renders it), so these cells launch exactly what those five recipes launch."""
NAME = "demo"
SAMPLE = SAMPLES_DIR / "dolly151.jsonl"
DATA_OUT = "data/dolly-sample"
"""The sample's prefix: configs/data/dolly-sample.yaml, which the CPU recipes read."""


def register(subparsers: Any) -> None:
    """Add `zerolab demo`."""
    parser = subparsers.add_parser(
        "demo",
        help="the CPU demo: five ZeRO setups of a tiny GPT-2, 2 ranks each, summarized in logs/sweeps/demo/",
        description="Prepare the bundled dolly-15k sample, then sweep the tiny GPT-2 over DP, ZeRO-1, "
        "ZeRO-2, ZeRO-3 and ZeRO-3 with CPU optimizer offload (two CPU ranks each; `zerolab sweep "
        f"{RECIPE} {' '.join(SETUPS)} --name {NAME}`) and summarize them side by side (summary.md, "
        "summary.json, plots) in logs/sweeps/demo/. Run again, it runs only what did not complete.",
    )
    parser.add_argument(
        "overrides", nargs="*", metavar="KEY=VALUE", help="applied to every setup, e.g. train.iters=100"
    )
    parser.add_argument("--name", default=NAME, help="the sweep directory: logs/sweeps/NAME (default demo)")
    parser.set_defaults(run=run_demo)


def demo_sweep(overrides: list[str]) -> Any:
    """The demo's sweep, with `overrides` applied to every setup."""

    return expand(RECIPE, [*SETUPS, *overrides])


def run_demo(args: argparse.Namespace) -> int:
    """Run the demo; 0 when all five setups completed."""

    console = Console(highlight=False)
    started = time.monotonic()
    console.rule("[bold]zerolab demo: 1/2 data")
    if run_prep(["dolly", "--input", str(SAMPLE), "--out", DATA_OUT]) != 0:
        return 1
    sweep = demo_sweep(list(args.overrides))
    console.rule(f"[bold]zerolab demo: 2/2 training {len(sweep.cells)} setups, 2 CPU ranks each")
    ran = run_sweep(sweep, check_name(args.name), retry_failed=True, console=console)
    if ran.ended:
        summarize_sweep(ran.directory)
    console.print(
        f"demo finished in {time.monotonic() - started:.0f} s; runs and summary in "
        f"{display_path(sweep_dir(args.name))}/"
    )
    return ran.exit_code
