"""request.json: what one fine-tuning run is asked to do, written into its run directory by the
render of a fine-tuning recipe (zerolab.recipe.render) and read by every rank of the loop
(zerolab.finetune.loop). The folder it is in is the run directory: the loop reads the DeepSpeed
config there (batch sizes, optimizer, ZeRO setup, precision, clipping, as for pretraining) and
writes its records, TensorBoard events and W&B run there. No path in it names the run directory,
so that a render printed before the directory exists is the request the launch writes.
Standard library only: the loop reads it in the engine's Python."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from zerolab.errors import UserError
from zerolab.files import write_atomic

REQUEST_FILE = "request.json"
EXPORTED_MODEL_DIR = "model"
"""Where in the run directory a launch exports the model of a run directory given as the model."""


@dataclass(frozen=True)
class FinetuneRequest:
    """One fine-tuning: model, data, length, schedule and where its DeepSpeed config is."""

    model: str
    """A Hugging Face GPT-2 folder, a hub name, or a run directory (see `exported`)."""
    exported: bool
    """The model is a run directory's checkpoint, exported into RUN_DIR/model before the ranks start."""
    task: str
    """The GLUE task (zerolab.finetune.glue)."""
    train_file: str
    eval_files: dict[str, str]
    """{split: file} of the validation splits scored after each epoch."""
    max_seq_length: int
    epochs: int
    lr_schedule: str
    """linear, cosine or constant, after the warm-up (transformers' schedules, which end at 0)."""
    warmup_steps: int
    weight_decay: float
    """For all weights but biases and layer norms, as Hugging Face's Trainer decays them."""
    seed: int
    shuffle: bool
    log_interval: int
    """Steps between the progress lines rank 0 prints."""
    attention: str
    """transformers' attn_implementation: eager, sdpa or flash_attention_2."""
    gradient_checkpointing: bool
    config: dict[str, Any]
    """GPT2Config keys set over the model's own: dropouts, initializer range."""
    tensorboard: bool = False
    """Write TensorBoard events into RUN_DIR/tensorboard."""
    wandb: dict[str, str] | None = None
    """{project, name} of a Weights & Biases run kept in RUN_DIR/wandb, or None."""

    def as_json(self) -> dict[str, Any]:
        """The request as request.json holds it."""
        return dataclasses.asdict(self)


def write_request(folder: Path, request: FinetuneRequest) -> Path:
    """Write `request` as FOLDER/request.json, whole."""
    path = folder / REQUEST_FILE
    write_atomic(path, json.dumps(request.as_json(), indent=2) + "\n")
    return path


def read_request(path: str | Path) -> FinetuneRequest:
    """The request in `path`; UserError naming the file when it is not one."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        return FinetuneRequest(**data)
    except (OSError, ValueError, TypeError) as error:
        raise UserError(f"{path}: not a fine-tuning request ({error})") from None
