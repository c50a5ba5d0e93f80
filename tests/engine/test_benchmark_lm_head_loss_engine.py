"""benchmarks/lm_head_loss.py on CPU with the real engine: the chunked linear cross-entropy it times
computes the engine's own loss and gradients (Megatron's vocab_parallel_cross_entropy), so that its
timings compare like with like."""

from __future__ import annotations

import re

from benchmark_helpers import table_rows

ROW = re.compile(r"\| (.+?) \| ([\d.]+) \| - \| ([\d.e+-]+) \|")


def test_the_chunked_loss_gives_the_engines_loss_and_gradients(engine, tmp_path):
    rows = table_rows("lm_head_loss", tmp_path, ROW, "--reps", "1")
    sides = {row.group(1): (float(row.group(2)), float(row.group(3))) for row in rows}
    assert len(sides) == 4 and next(iter(sides)).startswith("engine: ")
    for side, (ms, difference) in sides.items():
        assert ms > 0 and difference < 1e-5, (side, ms, difference)
