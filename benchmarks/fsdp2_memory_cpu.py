"""The FSDP2 loop's memory on CPU, measured for `zerolab estimate`: each FSDP2 setup (DDP, z2, z3,
z3 + CPUOffloadPolicy) of `recipes/cpu/tiny_fsdp2_*` launched at the tiny GPT-2 and at GPT-2 124M's
shape (context 128, 4 iterations, 2 ranks over gloo, fp32), its peak process-tree RSS read from the
run directory's samples.csv as `zerolab summarize` reads it. On CPU a rank's "GPU" is its host memory,
so the whole node is what the estimate predicts: (process + model states + activations) x ranks. The
tiny runs, whose model is a few MB, measure the per-rank process (zerolab/estimate/buffers.py
FSDP2_CPU_PROCESS_GIB); the 124M runs, 2-3 GB a rank, check the model terms.

Each launch runs twice: with glibc's default malloc, and with its mmap threshold fixed at 64 KiB
(MALLOC_MMAP_THRESHOLD_, so that every tensor over 64 KiB is its own mapping, unmapped when freed).
The default's dynamic threshold keeps freed buffers of a few MB in the heap: over 4 iterations at
124M a rank's RSS grows by up to 0.8 GiB above what it holds allocated (measured: ZeRO-3's counterpart
peaks at 2.78 GiB a rank by default and 1.93 GiB fixed, flat from iteration 2). The estimate predicts
allocations, as a GPU's allocator holds them, so it is checked against the fixed column; the default
one is what a plain `zerolab launch` on CPU shows. Run by hand (about 12 minutes on the 2-core
development machine, `make setup` first):

    .venv/bin/python benchmarks/fsdp2_memory_cpu.py    # tests/fixtures/estimate/fsdp2_cpu.csv

`benchmarks/estimate_calibration.py` tables the measurements against the estimate in
docs/estimate.md; tests/unit/test_estimate_calibration.py holds each to the target."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from zerolab.locations import REPO_ROOT

MEASURED_FILE = REPO_ROOT / "tests" / "fixtures" / "estimate" / "fsdp2_cpu.csv"
SETUPS = ("dp", "z2", "z3", "z3_offload")
SHORT = (
    "train.iters=4 train.lr_warmup_iters=1 train.log_interval=1 train.eval_iters=0 train.save_interval=null"
)
SHAPES = {
    "tiny": "",
    "124m": (
        "model=gpt2-124m model.seq_length=128 model.max_position_embeddings=128 train.global_batch_size=4"
    ),
}
"""The model shapes measured, as overrides of the tiny recipes (124M's context cut to the tiny data's 128)."""
COLUMNS = (
    "case",
    "recipe",
    "overrides",
    "measured_host_GiB",
    "measured_host_default_malloc_GiB",
    "measured_rank0_max_allocated_GiB",
    "provenance",
)


FIXED_MMAP_THRESHOLD = {"MALLOC_MMAP_THRESHOLD_": "65536"}
"""glibc's malloc with a fixed mmap threshold: freed tensors go back to the system at once."""


def measure(recipe: str, overrides: str, run_dir: Path, malloc: dict[str, str]) -> tuple[float, float]:
    """(peak process-tree RSS GiB, rank 0's max allocated GiB) of one launch under `malloc`'s settings."""
    words = [sys.executable, "-m", "zerolab", "launch", recipe, *overrides.split(), "--run-dir", str(run_dir)]
    done = subprocess.run(words, capture_output=True, text=True, env={**os.environ, **malloc})
    if done.returncode:
        raise SystemExit(
            f"{recipe} {overrides}: exit {done.returncode}\n{done.stdout[-3000:]}{done.stderr[-3000:]}"
        )
    summarized = subprocess.run(
        [sys.executable, "-m", "zerolab", "summarize", str(run_dir), "--out", str(run_dir / "summary")],
        capture_output=True,
        text=True,
    )
    if summarized.returncode:
        raise SystemExit(f"zerolab summarize {run_dir}: {summarized.stderr[-3000:]}")
    row = json.loads((run_dir / "summary" / "summary.json").read_text())["runs"][0]
    return float(row["peak_host_GiB"]), float(row["max_allocated_GiB"])


def main() -> None:
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        for shape, extra in SHAPES.items():
            for setup in SETUPS:
                recipe, overrides = f"cpu/tiny_fsdp2_{setup}", f"{SHORT} {extra}".strip()
                case = f"cpu_fsdp2_{setup}_{shape}"
                runs = Path(scratch)
                host, rank0 = measure(recipe, overrides, runs / f"{case}_fixed", FIXED_MMAP_THRESHOLD)
                default, _ = measure(recipe, overrides, runs / f"{case}_default", {})
                print(
                    f"{case}: peak host {host:.2f} GiB (default malloc {default:.2f}), "
                    f"rank 0 max allocated {rank0:.2f} GiB",
                    flush=True,
                )
                rows.append(
                    (
                        case,
                        f"recipes/cpu/tiny_fsdp2_{setup}.yaml",
                        overrides,
                        f"{host:.3f}",
                        f"{default:.3f}",
                        f"{rank0:.3f}",
                    )
                )
    provenance = "2-core development machine, 2 CPU ranks over gloo, samples.csv process-tree RSS (1 s)"
    with open(MEASURED_FILE, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(COLUMNS)
        writer.writerows((*row, provenance) for row in rows)
    print(f"wrote {MEASURED_FILE.relative_to(REPO_ROOT)}")


if __name__ == "__main__":
    main()
