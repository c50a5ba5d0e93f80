"""`zerolab ladder RECIPE [KEY=VALUE ...]`: the speed ladder of a recipe (docs/speed.md)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from zerolab.backends.driver import run
from zerolab.contracts import LADDER_ENV, LADDER_MD, Plan, plan_text
from zerolab.engine.ladder_phases import standard_phases
from zerolab.errors import UserError
from zerolab.launch.plan import plan as plan_launch
from zerolab.locations import LOGS_DIR
from zerolab.recipe.job import job_of
from zerolab.recipe.pretraining import Pretraining
from zerolab.recipe.selection import select
from zerolab.rundir import new_path

LADDER_SETTINGS = ("train.log_interval=1", "train.eval_iters=1", "train.save_interval=null")
"""What every ladder run sets after the user's overrides: a line per iteration, no validation or
checkpoint inside the ladder's timed iterations."""


def register(subparsers: Any) -> None:
    """Add `zerolab ladder`."""
    description = (
        "Launch a recipe once and measure zerolab's speed switches in it: the switches are turned "
        "between iterations, phase after phase (the engine as it is, dropout 0, each switch added, "
        "leave-one-out), and each phase's ms/iteration, host against GPU time in forward, backward "
        "and step, and peak memory go to RUN_DIR/ladder.md and ladder.json, written after every phase; "
        "the first phase and the switches' end state are profiled (kernels) and their host-device "
        "syncs counted by call site. train.iters is set to the ladder's length."
    )
    parser = subparsers.add_parser(
        "ladder", help="measure the speed switches in one launch", description=description
    )
    parser.add_argument(
        "words", nargs="+", metavar="RECIPE [KEY=VALUE ...]", help="recipe file or name, then overrides"
    )
    parser.add_argument("--warmup", type=int, default=1, help="untimed iterations at the start of each phase")
    parser.add_argument("--measured", type=int, default=3, help="timed iterations per phase")
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="times every phase runs, in turn (a phase's row pools them: a slow stretch of the machine "
        "is spread over every phase)",
    )
    parser.add_argument(
        "--run-dir",
        type=Path,
        help="write the run here instead of logs/ladder/NAME-TIMESTAMP (must not exist)",
    )
    parser.set_defaults(run=run_ladder)


def ladder_plan(
    words: list[str], warmup: int, measured: int, rounds: int, out: Path
) -> tuple[Plan, list[str]]:
    """The ladder for the recipe `words` name, writing into `out`, and the words that launch it."""
    if warmup < 0 or measured < 1 or rounds < 1:
        raise UserError(
            f"--warmup {warmup} --measured {measured} --rounds {rounds}: at least 0 untimed iterations, "
            "1 timed and 1 round"
        )
    recipe, _ = select(words, None)
    if not isinstance(job_of(recipe), Pretraining):
        raise UserError(
            f"{words[0]} fine-tunes (its finetune section): the ladder measures Megatron's pretraining steps"
        )
    tokens = recipe.train.global_batch_size * recipe.model.seq_length // recipe.world_size
    plan = Plan(standard_phases(), str(out), warmup, measured, tokens, rounds)
    return plan, [*words, *LADDER_SETTINGS, f"train.iters={plan.iterations()}"]


def run_ladder(args: argparse.Namespace) -> int:
    """Run the ladder; returns the training's exit code."""
    first = Path(args.words[0]).stem
    run_dir = args.run_dir or new_path(LOGS_DIR / "ladder", f"{first}-")
    plan, words = ladder_plan(list(args.words), args.warmup, args.measured, args.rounds, run_dir)
    planned = plan_launch(words, run_dir=run_dir)
    os.environ[LADDER_ENV] = plan_text(plan)
    try:
        _, status = run(planned)
    finally:
        os.environ.pop(LADDER_ENV, None)
    table = run_dir / LADDER_MD
    if table.is_file():
        print(table.read_text(), end="")
        print(f"zerolab: the ladder: {table}")
    return int(status.exit_code or 0)
