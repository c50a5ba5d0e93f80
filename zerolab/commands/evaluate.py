"""`zerolab eval TARGET --task ...`: a model's validation loss, WikiText perplexity and HellaSwag accuracy."""

from __future__ import annotations

import argparse
from typing import Any, get_args

from rich.console import Console
from rich.table import Table

from zerolab.errors import UserError
from zerolab.evaluate.run import evaluate
from zerolab.evaluate.tasks import DATA, TASKS
from zerolab.locations import display_path
from zerolab.rundir import EVAL_FILE, Scorer

METRIC_WORDS = {
    "loss": "loss (nats/token)",
    "ppl": "perplexity",
    "acc": "acc",
    "acc_norm": "acc_norm (per token)",
    "acc_norm_chars": "acc_norm (per char)",
}


def register(subparsers: Any) -> None:
    """Add `zerolab eval`."""
    parser = subparsers.add_parser(
        "eval",
        help="score a run's checkpoint or a GPT-2 folder: validation loss, WikiText perplexity, HellaSwag",
        description="Score TARGET (a run directory, one of its checkpoints RUN/checkpoints/global_stepN, a "
        "Hugging Face GPT-2 folder, or a hub name on a machine with network) on CPU. val: the run's own "
        "validation documents, loss and perplexity; wikitext: WikiText-103 test perplexity, windows of the "
        "model's context moved by --stride; hellaswag: acc (highest summed log-likelihood) and acc_norm "
        "(highest mean per token) and acc_norm_chars (per character, lm-evaluation-harness's acc_norm) over "
        "the validation set. A run's scores go into its eval.json, which "
        "`zerolab summarize` shows. docs/evaluate.md says what to expect.",
    )
    parser.add_argument("target", metavar="TARGET")
    parser.add_argument(
        "--task",
        required=True,
        help=f"one or more of {', '.join(TASKS)}, comma-separated (e.g. val,wikitext,hellaswag)",
    )
    parser.add_argument(
        "--data",
        choices=DATA,
        default="hub",
        help="hub: the whole sets through Hugging Face datasets; sample: the small samples shipped with "
        "zerolab (offline, tests; not comparable with published figures)",
    )
    parser.add_argument("--iteration", type=int, help="a run's checkpoint to score (default: the last saved)")
    parser.add_argument("--limit", type=int, help="score at most this many val rows or hellaswag tasks")
    parser.add_argument(
        "--stride", type=int, help="wikitext: tokens each window moves on (default: half the model's context)"
    )
    parser.add_argument(
        "--scorer",
        choices=get_args(Scorer),
        default="zerolab",
        help="hellaswag's scorer: zerolab's own, or lm-evaluation-harness (pinned in the engine's Python; "
        "the same prompts, its tokenization and log-likelihoods); the other tasks are zerolab's",
    )
    parser.set_defaults(run=run_eval)


def _tasks(text: str) -> list:
    asked = [word.strip() for word in text.split(",") if word.strip()]
    unknown = [word for word in asked if word not in TASKS]
    if unknown or not asked:
        raise UserError(f"--task {text!r}: give one or more of {', '.join(TASKS)}, comma-separated")
    return list(dict.fromkeys(asked))


def run_eval(args: argparse.Namespace) -> int:
    """Score, print a table, say where the scores were kept."""
    tasks = _tasks(args.task)
    for option in ("limit", "stride"):
        if getattr(args, option) is not None and getattr(args, option) < 1:
            raise UserError(f"--{option} {getattr(args, option)}: give a whole number of at least 1")
    if args.scorer != "zerolab" and "hellaswag" not in tasks:
        raise UserError(
            f"--scorer {args.scorer} scores hellaswag only: add it to --task, or leave --scorer out"
        )
    model, scores = evaluate(
        args.target,
        tasks,
        data=args.data,
        iteration=args.iteration,
        limit=args.limit,
        stride=args.stride,
        hellaswag_scorer=args.scorer,
    )
    where = f"{display_path(model.run_dir)} at iteration {model.iteration}" if model.run_dir else model.source
    table = Table(title=f"zerolab eval: {where}", title_justify="left")
    for header in ("task", "data", "scorer", "examples", "metric", "value"):
        table.add_column(header, justify="right" if header in ("examples", "value") else "left")
    for task, score in scores.items():
        for metric, value in score.metrics.items():
            table.add_row(
                task, score.data, score.scorer, f"{score.examples:,}", METRIC_WORDS[metric], f"{value:.4f}"
            )
    Console(highlight=False).print(table)
    if model.run_dir is not None:
        print(f"kept in {display_path(model.run_dir / EVAL_FILE)}")
    return 0
