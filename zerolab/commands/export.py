"""`zerolab export RUN_DIR --out DIR`: a run's checkpoint as a Hugging Face GPT-2 directory."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from zerolab.export.run import export_run
from zerolab.locations import display_path


def register(subparsers: Any) -> None:
    """Add `zerolab export`."""
    parser = subparsers.add_parser(
        "export",
        help="a run's checkpoint as a Hugging Face GPT-2 directory (transformers loads it)",
        description="Write the checkpoint of RUN_DIR (a run directory of `zerolab launch` or a sweep's "
        "cell) as a folder that transformers loads with GPT2LMHeadModel.from_pretrained and "
        "AutoTokenizer: model.safetensors (fp32, the vocabulary cut back to the tokenizer's), "
        "config.json (the run's shape and activation) and the GPT-2 tokenizer files. Any ZeRO "
        "stage, offload, tensor or pipeline parallel layout and precision; runs on CPU.",
    )
    parser.add_argument("run_dir", metavar="RUN_DIR", type=Path)
    parser.add_argument("--out", required=True, type=Path, help="the folder to write (new or empty)")
    parser.add_argument(
        "--iteration", type=int, default=None, help="the checkpoint to export (default: the last saved)"
    )
    parser.set_defaults(run=run_export)


def run_export(args: argparse.Namespace) -> int:
    """Export, then say what was written."""
    done = export_run(args.run_dir, args.out, args.iteration)
    print(f"wrote {display_path(done.out)}: {display_path(done.run_dir)} at iteration {done.iteration}")
    return 0
