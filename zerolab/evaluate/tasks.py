"""The evaluation tasks and their examples: `val` (a run's own validation documents), `wikitext`
(WikiText-103's test set) and `hellaswag` (HellaSwag's validation set), from the samples shipped in
zerolab/assets/eval/ (`sample`) or through Hugging Face `datasets` (`hub`). Each task's inputs are
what rank/score_hf.py scores."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Literal, get_args

import numpy as np

from zerolab.data_prep.indexed import read_document, read_index
from zerolab.data_prep.sources import HubDataset
from zerolab.errors import UserError
from zerolab.recipe.compose import load_recipe
from zerolab.recipe.inputs import blend, prepare_hint
from zerolab.recipe.megatron_split import split_ranges
from zerolab.rundir import RECIPE_FILE, EvalTask, whole_recipe

Task = EvalTask
TASKS: tuple[Task, ...] = get_args(EvalTask)
Data = Literal["hub", "sample"]
DATA: tuple[Data, ...] = get_args(Data)

SAMPLES = Path(__file__).resolve().parents[1] / "assets" / "eval"
WIKITEXT_SAMPLE = SAMPLES / "wikitext_test_sample.txt"
HELLASWAG_SAMPLE = SAMPLES / "hellaswag_val_sample.jsonl"
WITHOUT_HUB = "Without access to the Hugging Face hub, score the sample shipped with zerolab: --data sample"
WIKITEXT_HUB = HubDataset(
    "Salesforce/wikitext", split="test", config="wikitext-103-raw-v1", by_hand=WITHOUT_HUB
)
HELLASWAG_HUB = HubDataset("Rowan/hellaswag", split="validation", by_hand=WITHOUT_HUB)


def task_inputs(task: Task, data: Data, run_dir: Path | None, limit: int | None, stride: int | None) -> dict:
    """What score_hf.py needs for `task`: token rows, a text and its stride, or choice tasks."""
    if task == "val":
        if run_dir is None:
            raise UserError(
                "--task val scores a run's own validation split: give a run directory (or one of its "
                "checkpoints) as TARGET, or use --task wikitext for a model folder"
            )
        return {"rows": validation_rows(run_dir, limit)}
    if task == "wikitext":
        return {"text": _wikitext(data), "stride": stride}
    return {"docs": _hellaswag(data)[:limit]}


def validation_rows(run_dir: Path, limit: int | None) -> list[list[int]]:
    """The run's validation documents (data.valid_path whole, or Megatron's split of data.path by
    data.split), joined in order and cut into rows of seq_length + 1 tokens that share their edge
    token, as Megatron's samples do; at most `limit` rows."""
    recipe = load_recipe(whole_recipe(run_dir))
    data, seq = recipe.data, recipe.model.seq_length
    key = "valid_path" if data.path is None else "path"
    prefix = getattr(data, key)
    if prefix is None:
        raise UserError(f"{run_dir / RECIPE_FILE}: the run has no validation data (data.valid_path is null)")
    if blend(prefix) is not None:
        raise UserError(
            f"{run_dir / RECIPE_FILE}: data.{key} is a blend ({prefix!r}); the held-out documents are read "
            "from one prepared dataset: evaluate with a recipe whose data.valid_path is one prefix"
        )
    index_file, bin_file = Path(f"{prefix}.idx"), Path(f"{prefix}.bin")
    if not index_file.is_file() or not bin_file.is_file():
        raise UserError(
            f"data.{key}: {prefix}.bin/.idx not found from {Path.cwd()} (relative paths are relative to "
            f"where the run was launched: run zerolab eval from there); {prepare_hint(recipe, key)}"
        )
    index = read_index(index_file)
    first, end = (0, len(index)) if key == "valid_path" else split_ranges(data.split, len(index))[1]
    if end <= first:
        raise UserError(
            f"data.split {data.split!r} gives the validation split no documents of {prefix}; give it a "
            "weight (e.g. data.split=98,2,0)"
        )
    tokens = np.concatenate([read_document(bin_file, index, i) for i in range(first, end)]).astype(np.int64)
    count = (len(tokens) - 1) // seq
    if count == 0:
        raise UserError(
            f"the validation split of {prefix} holds {len(tokens)} tokens, fewer than one row of "
            f"model.seq_length + 1 = {seq + 1}; give the validation split more documents (data.split)"
        )
    count = min(count, limit) if limit else count
    return [tokens[i * seq : (i + 1) * seq + 1].tolist() for i in range(count)]


def _wikitext(data: Data) -> str:
    if data == "sample":
        return _sample(WIKITEXT_SAMPLE).read_text(encoding="utf-8")
    return "".join(WIKITEXT_HUB.load()["text"])


def _hellaswag(data: Data) -> list[dict]:
    if data == "sample":
        lines = _sample(HELLASWAG_SAMPLE).read_text(encoding="utf-8").splitlines()
        return [json.loads(line) for line in lines if line.strip()]
    return [hellaswag_record(row) for row in HELLASWAG_HUB.load()]


def hellaswag_record(row: dict[str, Any]) -> dict[str, Any]:
    """A HellaSwag row as lm-evaluation-harness's `hellaswag` task prompts it: `context` (the activity
    label, `: `, `ctx_a`, a space, `ctx_b` capitalized) and the `endings`, WikiHow's markers cleaned
    up, and the gold `label`."""
    return {
        "context": _clean(f"{row['activity_label']}: {row['ctx_a']} {row['ctx_b'].capitalize()}"),
        "endings": [_clean(ending) for ending in row["endings"]],
        "label": int(row["label"]),
    }


def _clean(text: str) -> str:
    """lm-evaluation-harness's clean-up of WikiHow's markers: ` [title]` ends a sentence, every other
    `[marker]` goes, a double space becomes one."""
    text = text.strip().replace(" [title]", ". ")
    return re.sub(r"\[.*?\]", "", text).replace("  ", " ")


def _sample(path: Path) -> Path:
    if not path.is_file():
        raise UserError(
            f"{path}: the evaluation sample shipped with zerolab is missing; reinstall zerolab "
            "(pip install -e .) or read the whole set with --data hub"
        )
    return path
