"""Writing a fine-tuning's request.json (zerolab.contracts.FinetuneRequest) into its run directory,
for the render of a fine-tuning recipe (zerolab.recipe.render); every rank of the loop
(zerolab.rank.finetune_loop) reads it."""

from __future__ import annotations

from pathlib import Path

from zerolab.contracts import REQUEST_FILE, FinetuneRequest, finetune_request_text
from zerolab.files import write_atomic


def write_request(folder: Path, request: FinetuneRequest) -> Path:
    """Write `request` as FOLDER/request.json, whole."""
    path = folder / REQUEST_FILE
    write_atomic(path, finetune_request_text(request))
    return path
