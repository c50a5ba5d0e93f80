"""Running the fine-tuning loop (zerolab.finetune.loop) as a user's launch would: torchrun of the
engine's Python on CPU ranks over gloo, with a request on the shipped WNLI sample; its records back."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from launch_helpers import free_port

from zerolab.engine.paths import engine_python_env
from zerolab.finetune.records import read_records
from zerolab.locations import REPO_ROOT
from zerolab.recipe import load_recipe
from zerolab.recipe.render import ds_config

SAMPLES = REPO_ROOT / "data_prep" / "samples" / "glue"


def fine_tune(
    engine_python: Path, model: Path, setup: str, out: Path, ranks: int = 2, **changes: Any
) -> list[dict[str, Any]]:
    """The loop's records of one fine-tuning of `model` on WNLI under cpu/tiny_SETUP's ds_config, on
    `ranks` processes, the request's defaults below updated with `changes`."""
    out.mkdir(parents=True)
    request = {
        "model": str(model),
        "task": "wnli",
        "train_file": str(SAMPLES / "wnli_train.jsonl"),
        "eval_files": {"validation": str(SAMPLES / "wnli_validation.jsonl")},
        "max_seq_length": 64,
        "epochs": 1,
        "micro_batch_size": 4,
        "global_batch_size": 16,  # 4 steps of 2 micro batches per rank
        "lr": 1e-3,
        "weight_decay": 0.01,
        "warmup_steps": 1,
        "seed": 42,
        "shuffle": True,
        "ds_config": ds_config(load_recipe(f"cpu/tiny_{setup}")),
        "out": str(out),
        **changes,
    }
    (out / "request.json").write_text(json.dumps(request))
    torchrun = engine_python.parent / "torchrun"
    command = [str(torchrun), "--nproc-per-node", str(ranks), "--master-port", str(free_port())]
    command += ["-m", "zerolab.finetune.loop", str(out / "request.json")]
    environment = engine_python_env() | {"DS_ACCELERATOR": "cpu", "OMP_NUM_THREADS": "1"}
    done = subprocess.run(command, env=environment, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    return read_records(out)
