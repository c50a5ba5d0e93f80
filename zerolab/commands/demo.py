"""`zerolab demo` (`make demo`): the seed study on CPU as one sweep. Prepares the bundled dolly-15k
sample, sweeps the tiny GPT-2 over the five ZeRO setups (DP, ZeRO 1, 2, 3, 3 + CPU offload), two
ranks each, into logs/sweeps/demo/, scores the setups' last checkpoints (`zerolab eval` on the
shipped samples: once for all those that hold the same weights) and summarizes them there side by
side."""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

from rich.console import Console

from zerolab.commands.prep import run_prep
from zerolab.evaluate.run import evaluate
from zerolab.evaluate.same_weights import differences_from_first
from zerolab.evaluate.tasks import TASKS
from zerolab.export.run import Exported, export_run
from zerolab.locations import SAMPLES_DIR, display_path
from zerolab.rundir import COMPLETED, SAME_WEIGHTS, last_checkpoint, read_eval, write_eval
from zerolab.summarize.report import summarize_sweep
from zerolab.sweep.cells import check_name, expand
from zerolab.sweep.plan import cell_dir, cell_state, read_plan, sweep_dir
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
        f"{RECIPE} {' '.join(SETUPS)} --name {NAME}`), score each setup's last checkpoint (`zerolab "
        "eval RUN --task val,wikitext,hellaswag --data sample`) and summarize them side by side "
        "(summary.md, summary.json, plots) in logs/sweeps/demo/. Run again, it runs only what did not "
        "complete.",
    )
    parser.add_argument(
        "overrides", nargs="*", metavar="KEY=VALUE", help="applied to every setup, e.g. train.iters=100"
    )
    parser.add_argument("--name", default=NAME, help="the sweep directory: logs/sweeps/NAME (default demo)")
    parser.set_defaults(run=run_demo)


def demo_sweep(overrides: list[str]) -> Any:
    """The demo's sweep, with `overrides` applied to every setup."""

    return expand(RECIPE, [*SETUPS, *overrides])


def evaluate_cells(directory: Path, console: Any) -> None:
    """`zerolab eval` of the completed cells' last checkpoints on the shipped samples, unless a
    cell's eval.json already scores that checkpoint on every task. Checkpoints holding the same
    weights as the first one's (ZeRO does not change the arithmetic) are scored once: each of the
    others gets that score, marked with the run it was scored as and how far apart the weights are."""
    plan, _ = read_plan(directory)
    todo = []
    for cell in plan.cells if plan else []:
        run_dir, saved = cell_dir(directory, cell), last_checkpoint(cell_dir(directory, cell))
        if cell_state(directory, cell) != COMPLETED or saved is None:
            continue
        done, _ = read_eval(run_dir)
        scored = done.tasks if done else {}
        if not all(task in scored and scored[task].iteration == saved for task in TASKS):
            todo.append((cell.name, run_dir, saved))
    if not todo:
        return
    with tempfile.TemporaryDirectory(prefix="zerolab-demo-") as scratch:
        exported = [export_run(run_dir, Path(scratch) / name, saved) for name, run_dir, saved in todo]
        differences = differences_from_first([e.out for e in exported]) if len(exported) > 1 else [0.0]
        names = [name for name, _, _ in todo]
        _score_once(list(zip(names, exported, differences, strict=True)), console)


def _score_once(cells: list[tuple[str, Exported, float]], console: Any) -> None:
    """Score each cell's export (name, export, largest weight difference from the first's) unless
    its weights are the first's: those get the first's scores."""
    first_name, first, _ = cells[0]
    first_scores = None
    for name, exported, difference in cells:
        run_dir = exported.run_dir
        if first_scores is not None and difference <= SAME_WEIGHTS:
            same = {
                "same_weights_as": first_name,
                "weights_difference": difference,
                "iteration": exported.iteration,
            }
            write_eval(run_dir, {task: score.model_copy(update=same) for task, score in first_scores.items()})
            console.print(
                f"{name}  the same weights as {first_name} (within {SAME_WEIGHTS:g}, largest difference "
                f"{difference:.1g}): its scores",
                soft_wrap=True,
                markup=False,
            )
            continue
        started = time.monotonic()
        _, scores = evaluate(str(run_dir), list(TASKS), data="sample", progress=False, exported=exported)
        if exported is first:
            first_scores = scores
        said = ", ".join(
            f"{task} {metric} {value:.4g}"
            for task, score in scores.items()
            for metric, value in score.metrics.items()
            if metric in ("ppl", "acc_norm")
        )
        console.print(f"{name}  {said}  ({time.monotonic() - started:.0f} s)", soft_wrap=True, markup=False)


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
        console.rule(
            "[bold]zerolab demo: each setup's last checkpoint scored (val, WikiText and HellaSwag samples)"
        )
        evaluate_cells(ran.directory, console)
        summarize_sweep(ran.directory)
    console.print(
        f"demo finished in {time.monotonic() - started:.0f} s; runs and summary in "
        f"{display_path(sweep_dir(args.name))}/"
    )
    return ran.exit_code
