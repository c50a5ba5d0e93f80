"""`zerolab summarize` and `zerolab compare`: parsers and what they run."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console

from zerolab.summarize.compare import comparison, rich_comparison
from zerolab.summarize.report import collect, default_out, print_report, write_report
from zerolab.summarize.stats import Warmup
from zerolab.summarize.summary import Options

if TYPE_CHECKING:
    from zerolab.summarize.summary import Options


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a positive number of TFLOP/s (e.g. 989.4 for an H100 SXM)"
        )
    return value


def _positive_int(text: str) -> int:
    if not text.isdigit() or int(text) == 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive whole number of tokens")
    return int(text)


def _common_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--format", choices=("table", "json"), default="table", help="print a table (default) or JSON"
    )
    parser.add_argument(
        "--warmup",
        default="10%",
        help="logged intervals left out of the steady state: a fraction of the iterations done ('10%%', "
        "'0.1') or an iteration count ('50'); the first logged interval is always left out (default: 10%%)",
    )
    parser.add_argument(
        "--peak-tflops",
        type=_positive_float,
        help="the GPU's peak dense bf16/fp16 TFLOP/s, for MFU (default: from the run's doctor.json "
        "when its GPU is a known one: A10, A40, A100, H100, H200)",
    )
    parser.add_argument(
        "--epoch-tokens",
        type=_positive_int,
        help="tokens in one epoch, for time per epoch (default: run.json or log)",
    )


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `summarize` and `compare`."""
    summarize = subparsers.add_parser(
        "summarize",
        help="training logs into per-run and cross-run tables and plots",
        description="Find every run under the given paths (run directories written by `zerolab launch`, or "
        "plain log files), and write summary.md, summary.csv, summary.json and PNG plots next to them "
        "(or to --out).",
    )
    summarize.add_argument("paths", nargs="+", type=Path, metavar="DIR_OR_FILE")
    summarize.add_argument("--out", type=Path, help="where to write the summary (default: next to the runs)")
    summarize.add_argument("--no-plots", action="store_true", help="write the tables only")
    _common_options(summarize)
    summarize.set_defaults(run=run_summarize)
    compare = subparsers.add_parser(
        "compare",
        help="each metric of two or more runs as a ratio to a baseline",
        description="Summarize the given runs and show each metric as a ratio to the baseline run: "
        "--baseline (a run name or a run directory), else the first run given (a folder's runs in the "
        "summary's order). Each run's status is shown; a run that did not complete gets no ratio and "
        "cannot be the baseline.",
    )
    compare.add_argument("paths", nargs="+", type=Path, metavar="RUN")
    compare.add_argument(
        "--baseline",
        metavar="NAME_OR_RUN_DIR",
        help="the run the others are divided by: its name (as the summary shows it, or the run's own "
        "name when only one run has it) or its run directory (default: the first run given)",
    )
    _common_options(compare)
    compare.set_defaults(run=run_compare)


def _options(args: argparse.Namespace) -> Options:

    return Options(
        warmup=Warmup.parse(args.warmup), peak_tflops=args.peak_tflops, epoch_tokens=args.epoch_tokens
    )


def run_summarize(args: argparse.Namespace) -> int:
    """Summarize, write the files, print the table (or JSON)."""

    collection = collect(args.paths, _options(args))
    report = write_report(collection, args.out or default_out(args.paths), plots=not args.no_plots)
    print_report(report, as_json=args.format == "json")
    return 0


def run_compare(args: argparse.Namespace) -> int:
    """Print each metric of the runs as a ratio to the baseline."""

    result = comparison(collect(args.paths, _options(args)), args.baseline, args.paths)
    if args.format == "json":
        sys.stdout.write(json.dumps(result, indent=2) + "\n")
    else:
        Console().print(rich_comparison(result))
    return 0
