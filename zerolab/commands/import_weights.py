"""`zerolab import MODEL --out DIR`: a Hugging Face GPT-2 as the engine's checkpoints a run starts from."""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Any

from zerolab.export.importer import import_model
from zerolab.locations import display_path


def _layout(text: str) -> tuple[int, int]:
    match = re.fullmatch(r"(\d+)x(\d+)", text.strip())
    if not match:
        raise argparse.ArgumentTypeError(f"{text!r}: give TENSORxPIPELINE, e.g. 1x1 or 2x2")
    return int(match[1]), int(match[2])


def register(subparsers: Any) -> None:
    """Add `zerolab import`."""
    parser = subparsers.add_parser(
        "import",
        help="a Hugging Face GPT-2 as engine checkpoints, for runs that start from it (model.init_from)",
        description="Write MODEL (a Hugging Face GPT-2 directory with its tokenizer, or a hub name such as "
        "gpt2 on a machine that reaches the hub) into DIR as the engine's checkpoints, one per parallel "
        "layout, with the tokenizer files and zerolab-import.json. A recipe starts from them with "
        "model.init_from=DIR (weights only: a fresh optimizer, schedule and iteration count). Runs on CPU.",
    )
    parser.add_argument("model", metavar="MODEL")
    parser.add_argument("--out", required=True, type=Path, help="the folder to write (must not exist)")
    parser.add_argument(
        "--parallel",
        type=_layout,
        action="append",
        metavar="TxP",
        help="a layout to write: tensor x pipeline parallel (repeatable; default 1x1); a recipe's "
        "parallel.tensor and parallel.pipeline pick one",
    )
    parser.add_argument(
        "--make-vocab-size-divisible-by",
        type=int,
        default=1,
        metavar="N",
        help="pad the vocabulary to a multiple of N x tensor parallel, as the engine does (default 1: the "
        "fewest padded rows; recipes that start from the weights set model.make_vocab_size_divisible_by "
        "the same)",
    )
    parser.set_defaults(run=run_import)


def run_import(args: argparse.Namespace) -> int:
    """Import, then say what was written."""
    layouts = args.parallel or [(1, 1)]
    weights = import_model(args.model, args.out, layouts, args.make_vocab_size_divisible_by)
    shown = ", ".join(
        f"{tag} (vocabulary {layout.padded_vocab_size})" for tag, layout in weights.layouts.items()
    )
    print(f"wrote {display_path(args.out)}: {weights.source}, {shown}")
    return 0
