"""The largest absolute difference between the weights of Hugging Face GPT-2 folders and those of
the first, in the engine's Python (torch, safetensors): `python weight_difference.py REQUEST.json`.
The request, written by zerolab/evaluate/same_weights.py, names the folders and the result file; a
folder whose tensors differ in name or shape from the first's is infinitely far. It imports torch
and safetensors only (not zerolab), as score_hf.py does."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

from zerolab.rank.collector import collector_paused

with collector_paused():
    import torch
    from safetensors.torch import load_file

    from zerolab.rank.prompt_exit import exit_now


def _weights(folder: str) -> dict[str, torch.Tensor]:
    path = Path(folder) / "model.safetensors"
    try:
        return load_file(str(path))
    except (OSError, RuntimeError, ValueError) as error:
        sys.exit(f"zerolab weights: {path}: unreadable ({error})")


def largest_difference(first: dict[str, torch.Tensor], other: dict[str, torch.Tensor]) -> float:
    """max |a - b| over every tensor of the two, or infinity when their names or shapes differ."""
    if first.keys() != other.keys() or any(first[k].shape != other[k].shape for k in first):
        return math.inf
    return max((float((first[k].double() - other[k].double()).abs().max()) for k in first), default=0.0)


def main(request_file: str) -> None:
    request = json.loads(Path(request_file).read_text())
    folders = request["folders"]
    first = _weights(folders[0])
    differences = [largest_difference(first, _weights(folder)) for folder in folders]
    Path(request["result"]).write_text(json.dumps({"differences": differences}))


if __name__ == "__main__":
    main(sys.argv[1])
    exit_now(0)
