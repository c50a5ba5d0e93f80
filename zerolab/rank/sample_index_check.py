"""Megatron's C++ dataset helpers (megatron/data/helpers.cpp, the pybind11 module that builds the
dataset's sample index) checked by calling build_sample_idx in a process of its own, so that a
crash is seen rather than suffered (on one machine, pybind11 3.1.0 with numpy 2.5.2 segfaulted
there and killed the run before its first iteration).

`python sample_index_check.py DATA_DIR` is that process: it prints SAMPLE_INDEX_OK when the helpers in
DATA_DIR answer correctly. The workaround python_sample_index runs it before every launch imports
the helpers (`smoke_check`); `make setup` and `zerolab doctor` run it too
(zerolab.engine.data_helpers). Standard library at module level."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from zerolab.contracts import SAMPLE_INDEX_OK


@dataclass(frozen=True)
class SmokeCheck:
    """How the helpers' build_sample_idx fared: `ok`, and in words what happened."""

    ok: bool
    detail: str


def smoke_check(data_dir: Path, python: Path, timeout_s: float = 120) -> SmokeCheck:
    """Run this check of the helpers in `data_dir` with `python` in a process of its own; a crash,
    an import error or a wrong answer is reported, not raised."""
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "PYTHONHOME")}
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[2])  # this zerolab, for its contracts
    try:
        result = subprocess.run(
            [str(python), __file__, str(data_dir)], capture_output=True, text=True, timeout=timeout_s, env=env
        )
    except subprocess.TimeoutExpired:
        return SmokeCheck(False, f"build_sample_idx did not return within {timeout_s:.0f} s")
    if result.returncode < 0:
        number = -result.returncode  # the words of zerolab.logs.signals, which this side cannot import
        name = signal.Signals(number).name
        return SmokeCheck(False, f"build_sample_idx killed by {name} (signal {number})")
    if result.returncode != 0 or SAMPLE_INDEX_OK not in result.stdout:
        last = (result.stderr.strip().splitlines() or ["no output"])[-1]
        return SmokeCheck(False, f"build_sample_idx failed: {last[:300]}")
    return SmokeCheck(True, "build_sample_idx answers correctly")


def main(data_dir: str) -> None:
    """Call the helpers' build_sample_idx in `data_dir` and check its answer (AssertionError if wrong)."""
    import numpy as np  # noqa: PLC0415 (the engine's numpy, only in this process: the helpers are built against it)

    sys.path.insert(0, data_dir)
    import helpers  # noqa: PLC0415 (the compiled module in data_dir, importable only now)

    # 100 documents of 50 tokens, sequences of 20 tokens, one epoch of 5000 tokens
    sample_idx = helpers.build_sample_idx(
        np.full(100, 50, np.int32), np.arange(100, dtype=np.int32), 20, 1, 5000
    )
    rows = [list(map(int, row)) for row in sample_idx]
    first, last = [[0, 0], [0, 20], [0, 40], [1, 10]], [99, 30]
    right = len(rows) == 250 and rows[:4] == first and rows[-1] == last
    assert right, ("wrong sample index", rows[:4], rows[-1])
    print(SAMPLE_INDEX_OK)


if __name__ == "__main__":
    main(sys.argv[1])
