"""Writing a request.json into its run directory, for the render (zerolab.recipe.render): a
fine-tuning's (zerolab.contracts.FinetuneRequest, read by every rank of zerolab.rank.finetune_loop) or
an FSDP2 run's (zerolab.contracts.Fsdp2Request, read by zerolab.rank.fsdp2_train)."""

from __future__ import annotations

from pathlib import Path

from zerolab.contracts import REQUEST_FILE, FinetuneRequest, Fsdp2Request, request_text
from zerolab.files import write_atomic


def write_request(folder: Path, request: FinetuneRequest | Fsdp2Request) -> Path:
    """Write `request` as FOLDER/request.json, whole."""
    path = folder / REQUEST_FILE
    write_atomic(path, request_text(request))
    return path
