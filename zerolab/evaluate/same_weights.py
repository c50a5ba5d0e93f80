"""How far apart the weights of Hugging Face GPT-2 folders are: the largest absolute difference of
each folder's tensors from the first folder's, computed in the engine's Python
(rank/weight_difference.py). Within rundir.SAME_WEIGHTS they are one model."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from zerolab.contracts import rank_script
from zerolab.engine.scripts import run_engine_script

SCRIPT = rank_script("weight_difference")


def differences_from_first(folders: list[Path]) -> list[float]:
    """max |w - w_first| over all tensors, for each folder (0.0 for the first; infinity where the
    tensors' names or shapes differ)."""
    with tempfile.TemporaryDirectory(prefix="zerolab-weights-") as work:
        result = Path(work) / "result.json"
        request = {"folders": [str(folder) for folder in folders], "result": str(result)}
        run_engine_script(SCRIPT, request, Path(work), name="weights")
        return json.loads(result.read_text())["differences"]
