"""A Hugging Face GPT-2 of a given shape with random weights (seeded) and the bundled GPT-2
tokenizer, saved as transformers saves a model: what fine-tuning's memory and speed are measured
with where a model cannot be downloaded (the GPU check's machine) and what the tests fine-tune.
Run in the engine's Python:

    python -m zerolab.finetune.random_model --layers 48 --hidden 1600 --heads 25 --out DIR
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
from transformers import GPT2Config, GPT2LMHeadModel, GPT2TokenizerFast

from zerolab.assets import GPT2_MERGES, GPT2_VOCAB
from zerolab.files import folder_written_whole


def save_random_gpt2(out: Path, layers: int, hidden: int, heads: int, positions: int, seed: int) -> None:
    """Write the model and tokenizer into `out` (new or empty), whole or not at all."""
    torch.manual_seed(seed)
    config = GPT2Config(n_layer=layers, n_embd=hidden, n_head=heads, n_positions=positions)
    with folder_written_whole(out) as partial:
        GPT2LMHeadModel(config).save_pretrained(partial)
        GPT2TokenizerFast(vocab=str(GPT2_VOCAB), merges=str(GPT2_MERGES)).save_pretrained(partial)


def main(argv: list[str] | None = None) -> int:
    """The command line."""
    parser = argparse.ArgumentParser(prog="python -m zerolab.finetune.random_model", description=__doc__)
    parser.add_argument("--layers", type=int, required=True)
    parser.add_argument("--hidden", type=int, required=True)
    parser.add_argument("--heads", type=int, required=True)
    parser.add_argument("--positions", type=int, default=1024)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--out", type=Path, required=True, help="the folder to write (new or empty)")
    args = parser.parse_args(argv)
    if args.out.exists() and (not args.out.is_dir() or any(args.out.iterdir())):
        parser.error(f"--out {args.out}: already exists and is not an empty folder; give a new folder")
    save_random_gpt2(args.out, args.layers, args.hidden, args.heads, args.positions, args.seed)
    print(f"wrote {args.out}: a GPT-2 of {args.layers} layers, hidden {args.hidden}, random weights")
    return 0


if __name__ == "__main__":
    sys.exit(main())
