"""A Hugging Face GPT-2 of a given shape with random weights (seeded) and the bundled GPT-2
tokenizer, saved as transformers saves a model: what fine-tuning's memory and speed are measured
with where a model cannot be downloaded (the GPU check's machine) and what the tests fine-tune.
Run in the engine's Python:

    python -m zerolab.rank.random_gpt2 --layers 48 --hidden 1600 --heads 25 --out DIR \
        --tokenizer VOCAB MERGES
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from pathlib import Path

from zerolab.rank.collector import collector_paused

with collector_paused():
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel, GPT2TokenizerFast

    from zerolab.rank.prompt_exit import exit_now


def save_random_gpt2(
    out: Path, layers: int, hidden: int, heads: int, positions: int, seed: int, tokenizer: tuple[Path, Path]
) -> None:
    """Write the model and the tokenizer of `tokenizer` (vocab.json, merges.txt) into `out` (new or
    empty), whole or not at all: written beside it, then renamed."""
    torch.manual_seed(seed)
    config = GPT2Config(n_layer=layers, n_embd=hidden, n_head=heads, n_positions=positions)
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = Path(tempfile.mkdtemp(prefix=f".{out.name}.partial-", dir=out.parent))
    try:
        GPT2LMHeadModel(config).save_pretrained(partial)
        GPT2TokenizerFast(vocab=str(tokenizer[0]), merges=str(tokenizer[1])).save_pretrained(partial)
        partial.chmod(0o755)
        if out.is_dir():
            out.rmdir()
        partial.rename(out)
    finally:
        shutil.rmtree(partial, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    """The command line."""
    parser = argparse.ArgumentParser(prog="python -m zerolab.rank.random_gpt2", description=__doc__)
    parser.add_argument("--layers", type=int, required=True)
    parser.add_argument("--hidden", type=int, required=True)
    parser.add_argument("--heads", type=int, required=True)
    parser.add_argument("--positions", type=int, default=1024)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--out", type=Path, required=True, help="the folder to write (new or empty)")
    parser.add_argument(
        "--tokenizer", type=Path, nargs=2, required=True, metavar=("VOCAB", "MERGES"), help="GPT-2's files"
    )
    args = parser.parse_args(argv)
    if args.out.exists() and (not args.out.is_dir() or any(args.out.iterdir())):
        parser.error(f"--out {args.out}: already exists and is not an empty folder; give a new folder")
    save_random_gpt2(
        args.out, args.layers, args.hidden, args.heads, args.positions, args.seed, tuple(args.tokenizer)
    )
    print(f"wrote {args.out}: a GPT-2 of {args.layers} layers, hidden {args.hidden}, random weights")
    return 0


if __name__ == "__main__":
    exit_now(main())
