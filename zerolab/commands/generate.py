"""`zerolab generate TARGET "prompt"`: text sampled from a run's checkpoint or a GPT-2 folder."""

from __future__ import annotations

import argparse
from typing import Any

from zerolab.errors import UserError
from zerolab.evaluate.generate import Sampling, generate


def register(subparsers: Any) -> None:
    """Add `zerolab generate`."""
    defaults = Sampling()
    parser = subparsers.add_parser(
        "generate",
        help="sample text from a run's checkpoint or a GPT-2 folder",
        description="Continue PROMPT with TARGET (a run directory, one of its checkpoints, a Hugging Face "
        "GPT-2 folder, or a hub name on a machine with network), through transformers' generate, on CPU. "
        "The same seed and settings give the same text.",
    )
    parser.add_argument("target", metavar="TARGET")
    parser.add_argument("prompt", metavar="PROMPT")
    parser.add_argument("--max-new-tokens", type=int, default=defaults.max_new_tokens, help="tokens to add")
    parser.add_argument(
        "--temperature", type=float, default=defaults.temperature, help="softmax temperature; 0: greedy"
    )
    parser.add_argument(
        "--top-k", type=int, default=defaults.top_k, help="sample from the k likeliest tokens"
    )
    parser.add_argument("--seed", type=int, default=defaults.seed)
    parser.add_argument("--samples", type=int, default=defaults.samples, help="completions to draw")
    parser.add_argument("--iteration", type=int, help="a run's checkpoint (default: the last saved)")
    parser.set_defaults(run=run_generate)


def run_generate(args: argparse.Namespace) -> int:
    """Sample, print each completion after its prompt."""
    for option in ("max_new_tokens", "top_k", "samples"):
        if getattr(args, option) < 1:
            raise UserError(f"--{option.replace('_', '-')} {getattr(args, option)}: give at least 1")
    if args.temperature < 0:
        raise UserError(f"--temperature {args.temperature}: give 0 (greedy) or more")
    if args.temperature == 0 and args.samples > 1:
        raise UserError(
            f"--samples {args.samples} with --temperature 0: greedy decoding gives one text; give "
            "--samples 1, or a temperature above 0 to draw several"
        )
    if not args.prompt:
        raise UserError("PROMPT is empty: give the text to continue")
    sampling = Sampling(args.max_new_tokens, args.temperature, args.top_k, args.seed, args.samples)
    _, completions, allowed = generate(args.target, args.prompt, sampling, args.iteration)
    if allowed < args.max_new_tokens:
        print(f"(the prompt leaves room for {allowed} new tokens in the model's context)")
    for number, completion in enumerate(completions, 1):
        if len(completions) > 1:
            print(f"--- sample {number}")
        print(args.prompt + completion)
    return 0
