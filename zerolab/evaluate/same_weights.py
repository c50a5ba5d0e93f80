"""Whether Hugging Face GPT-2 folders hold the same weights: the largest absolute difference of
each folder's tensors from the first folder's, computed in the engine's Python
(evaluate/weight_difference.py)."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from zerolab.engine.scripts import run_engine_script

SCRIPT = Path(__file__).resolve().with_name("weight_difference.py")
SAME_WEIGHTS = 1e-6
"""Weights no further apart than this (in any tensor, absolute) are the same model: far below
what a score printed to four digits can show, and what one optimizer step of the demo moves."""


def differences_from_first(folders: list[Path]) -> list[float]:
    """max |w - w_first| over all tensors, for each folder (0.0 for the first; infinity where the
    tensors' names or shapes differ)."""
    with tempfile.TemporaryDirectory(prefix="zerolab-weights-") as work:
        result = Path(work) / "result.json"
        request = {"folders": [str(folder) for folder in folders], "result": str(result)}
        run_engine_script(SCRIPT, request, Path(work), name="weights")
        return json.loads(result.read_text())["differences"]
