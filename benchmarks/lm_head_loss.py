"""The language-model head and loss at tensor parallel 1: the engine's own (the logits of
`parallel_lm_logits`, a plain matmul at tensor parallel 1, then `vocab_parallel_cross_entropy` of
them in fp32, as Megatron's GPT model computes its loss) against a chunked linear cross-entropy that
never holds the whole logits (each chunk of tokens: its logits, their log-sum-exp, and in the
backward pass the same logits again, turned into the gradients). Forward and backward of one micro
batch, the median of `--reps` after a warm-up, with both sides' gradients compared; on CUDA the peak
memory too. Run by hand (issue 47's third item: a switch only if this says it pays):

    .venv/bin/python benchmarks/lm_head_loss.py                  # CPU: the demo's micro batch, 1 thread
    .venv/bin/python benchmarks/lm_head_loss.py --device cuda    # GPT-2 124M at micro batch 16, bf16

It runs the measurement in the engine's Python (`make setup`), Megatron's own cross-entropy included.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from zerolab.engine.paths import engine_missing
from zerolab.engine.scripts import engine_json

RESULTS = Path(__file__).resolve().parent / "results"
SHAPES = {
    "cpu": {"tokens": 256, "hidden": 64, "dtype": "float32", "chunks": [32, 64, 128]},
    "cuda": {"tokens": 16384, "hidden": 768, "dtype": "bfloat16", "chunks": [1024, 4096]},
}
WHAT = {"cpu": "the CPU demo's micro batch (2 x 128)", "cuda": "GPT-2 124M, micro batch 16 x 1024"}
VOCAB = 50304  # GPT-2's 50,257 padded to a multiple of 128, as the recipes pad it


def measure(device: str, reps: int) -> dict[str, Any]:
    """In the engine's Python: each side's median ms (and CUDA peak GiB), and how far apart their
    losses and gradients are."""
    import torch
    import torch.distributed as dist
    from megatron.core import parallel_state, tensor_parallel

    shape = SHAPES[device]
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29531")
    dist.init_process_group("nccl" if device == "cuda" else "gloo", rank=0, world_size=1)
    parallel_state.initialize_model_parallel(1, 1)
    if device == "cpu":
        torch.set_num_threads(1)  # as each of the demo's two ranks runs
    dtype = getattr(torch, shape["dtype"])
    generator = torch.Generator().manual_seed(0)
    hidden = torch.randn(shape["tokens"], shape["hidden"], generator=generator).to(device, dtype)
    weight = (torch.randn(VOCAB, shape["hidden"], generator=generator) * 0.02).to(device, dtype)
    labels = torch.randint(0, VOCAB, (shape["tokens"],), generator=generator).to(device)

    class ChunkedLinearCrossEntropy(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, h: Any, w: Any, target: Any, chunk: int) -> Any:
            lse = torch.empty(h.shape[0], device=h.device, dtype=torch.float32)
            losses = torch.empty_like(lse)
            for start in range(0, h.shape[0], chunk):
                logits = (h[start : start + chunk] @ w.t()).float()
                lse[start : start + chunk] = torch.logsumexp(logits, -1)
                picked = logits.gather(-1, target[start : start + chunk, None]).squeeze(-1)
                losses[start : start + chunk] = lse[start : start + chunk] - picked
            ctx.save_for_backward(h, w, target, lse)
            ctx.chunk = chunk
            return losses

        @staticmethod
        def backward(ctx: Any, grad: Any) -> Any:
            h, w, target, lse = ctx.saved_tensors
            grad_h, grad_w = torch.empty_like(h), torch.zeros(w.shape, device=w.device, dtype=torch.float32)
            for start in range(0, h.shape[0], ctx.chunk):
                rows = slice(start, start + ctx.chunk)
                softmax = (h[rows] @ w.t()).float().sub_(lse[rows, None]).exp_()
                softmax[torch.arange(softmax.shape[0], device=h.device), target[rows]] -= 1
                softmax.mul_(grad[rows, None])
                grad_h[rows] = (softmax.to(h.dtype) @ w).to(h.dtype)
                grad_w.addmm_(softmax.t(), h[rows].float())
            return grad_h, grad_w.to(w.dtype), None, None

    def engine_side() -> Any:
        logits = hidden @ weight.t()  # parallel_lm_logits at tensor parallel 1, [s*b, vocab]
        # Megatron's GPT loss: vocab_parallel_cross_entropy(output.float(), labels), [s, b] shaped
        return tensor_parallel.vocab_parallel_cross_entropy(logits.float()[:, None], labels[:, None])[:, 0]

    sides = {"engine: logits, then vocab_parallel_cross_entropy in fp32": engine_side}
    for chunk in shape["chunks"]:
        sides[f"chunked linear cross-entropy, {chunk} tokens a chunk"] = lambda c=chunk: (
            ChunkedLinearCrossEntropy.apply(hidden, weight, labels, c)
        )

    def step(side: Any) -> tuple[Any, Any, Any]:
        hidden.grad = weight.grad = None
        losses = side()
        losses.mean().backward()
        return losses.detach(), hidden.grad, weight.grad

    def synchronize() -> None:
        if device == "cuda":
            torch.cuda.synchronize()

    hidden.requires_grad_(True)
    weight.requires_grad_(True)
    reference = step(sides[next(iter(sides))])
    rows = []
    for name, side in sides.items():
        step(side)  # warm-up
        if device == "cuda":
            torch.cuda.reset_peak_memory_stats()
        times = []
        for _ in range(reps):
            synchronize()
            began = time.perf_counter()
            result = step(side)
            synchronize()
            times.append((time.perf_counter() - began) * 1000)
        rows.append(
            {
                "side": name,
                "ms": statistics.median(times),
                "peak_gib": torch.cuda.max_memory_allocated() / 2**30 if device == "cuda" else None,
                "max_difference": max(
                    (mine.float() - theirs.float()).abs().max().item()
                    for mine, theirs in zip(result, reference, strict=True)
                ),
            }
        )
    dist.destroy_process_group()
    return {"device": device, "shape": shape, "vocab": VOCAB, "reps": reps, "rows": rows}


def report(measured: dict[str, Any]) -> str:
    """The markdown table of one measurement."""
    shape = measured["shape"]
    lines = [
        f"# The LM head and loss, {measured['device']}: {WHAT[measured['device']]}",
        "",
        f"{shape['tokens']} tokens, hidden {shape['hidden']}, vocabulary {measured['vocab']}, "
        f"{shape['dtype']}; forward and backward, median of {measured['reps']} "
        "(`benchmarks/lm_head_loss.py`).",
        "",
        "| side | ms | peak GiB | largest difference from the engine's loss and gradients |",
        "|---|---|---|---|",
    ]
    for row in measured["rows"]:
        peak = "-" if row["peak_gib"] is None else f"{row['peak_gib']:.2f}"
        lines.append(f"| {row['side']} | {row['ms']:.1f} | {peak} | {row['max_difference']:.1e} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    """Measure in the engine's Python and write the table (benchmarks/results/lm-head-loss-DEVICE.md)."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--device", choices=sorted(SHAPES), default="cpu")
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--out", type=Path, help="where the table goes (default: benchmarks/results/)")
    parser.add_argument("--measure", action="store_true", help=argparse.SUPPRESS)  # the engine-side half
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(measure(args.device, args.reps)))
        return 0
    missing = engine_missing()
    if missing:
        print(f"lm_head_loss: {missing}", file=sys.stderr)
        return 2
    try:
        measured = engine_json(Path(__file__), "--measure", "--device", args.device, "--reps", str(args.reps))
    except RuntimeError as failed:
        print(failed, file=sys.stderr)
        return 1
    table = report(measured)
    out = args.out or RESULTS / f"lm-head-loss-{args.device}.md"
    out.write_text(table)
    print(table, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
