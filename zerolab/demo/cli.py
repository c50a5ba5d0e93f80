"""`zerolab demo` (`make demo`): the seed study on CPU. Prepares the bundled dolly-15k sample,
trains the tiny GPT-2 under the five setups (DP, ZeRO 1, 2, 3, 3 + CPU offload) with two
ranks each, then summarizes them side by side into logs/demo/."""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from zerolab.locations import SAMPLES_DIR, display_path

RECIPES = ("cpu/tiny_dp", "cpu/tiny_z1", "cpu/tiny_z2", "cpu/tiny_z3", "cpu/tiny_z3_offload")
SAMPLE = SAMPLES_DIR / "dolly151.jsonl"
DATA_OUT = "data/dolly"
OUT = Path("logs") / "demo"


def register(subparsers: Any) -> None:
    """Add `zerolab demo`."""
    parser = subparsers.add_parser(
        "demo",
        help="the CPU demo: five ZeRO setups of a tiny GPT-2, 2 ranks each, summarized in logs/demo/",
        description="Prepare the bundled dolly-15k sample, train the tiny GPT-2 under DP, ZeRO-1, "
        "ZeRO-2, ZeRO-3 and ZeRO-3 with CPU optimizer offload (two CPU ranks each), and write "
        "their side-by-side summary (summary.md, summary.json, plots) to logs/demo/.",
    )
    parser.add_argument(
        "overrides", nargs="*", metavar="KEY=VALUE", help="applied to every recipe, e.g. train.iters=100"
    )
    parser.add_argument("--out", type=Path, default=OUT, help="where the summary goes (default logs/demo)")
    parser.set_defaults(run=run_demo)


def run_demo(args: argparse.Namespace) -> int:
    """Run the demo; 0 when all five runs completed."""
    from rich.console import Console

    from zerolab.cli import main
    from zerolab.demo.progress import RunProgress
    from zerolab.launch.launcher import launch, prepare

    console = Console()
    started = time.monotonic()
    console.rule("[bold]zerolab demo: 1/3 data")
    if main(["prep", "dolly", "--input", str(SAMPLE), "--out", DATA_OUT]) != 0:
        return 1
    prepared = [prepare([recipe, *args.overrides]) for recipe in RECIPES]  # every check before any run

    console.rule(f"[bold]zerolab demo: 2/3 training {len(RECIPES)} setups, 2 CPU ranks each")
    run_dirs: list[Path] = []
    failed: list[str] = []
    for number, recipe in enumerate(prepared, start=1):
        progress = RunProgress(console, f"[{number}/{len(prepared)}] {recipe.name}")
        run_dir, status = launch(recipe, echo=progress.line)
        progress.done(status, run_dir)
        run_dirs.append(run_dir)
        if status.state != "completed":
            failed.append(f"{recipe.name} ({status.state}: {status.cause})")

    console.rule("[bold]zerolab demo: 3/3 summary")
    args.out.mkdir(parents=True, exist_ok=True)
    summarized = main(["summarize", *map(str, run_dirs), "--out", str(args.out)])
    console.print(
        f"demo finished in {time.monotonic() - started:.0f} s; summary in {display_path(args.out)}/"
    )
    if failed:
        console.print(f"[bold red]failed:[/] {', '.join(failed)}; see each run's train.log")
        return 1
    return summarized
