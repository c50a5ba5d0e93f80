"""`zerolab eval` and `zerolab generate` on bad input, before any model loads: each a clear error
naming the path or option and the fix, exit status 2, nothing written. And the pieces users rely
on that need no engine: Megatron's split of the validation documents, the shipped samples, and a
HellaSwag row from the hub made into the record the samples hold."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from evaluate_helpers import FIRST_HELLASWAG_ROW

from zerolab.cli import main
from zerolab.evaluate import tasks
from zerolab.evaluate.tasks import hellaswag_record
from zerolab.recipe.megatron_split import split_ranges


def _folder(
    tmp_path: Path, config: dict, files: tuple[str, ...] = ("model.safetensors", "tokenizer.json")
) -> Path:
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config))
    for name in files:
        (folder / name).write_text("")
    if "model.safetensors" in files:
        (folder / "model.safetensors").write_bytes(b"\x02\0\0\0\0\0\0\0{}")  # safetensors of no tensors
    return folder


@pytest.mark.parametrize("command", ["eval", "generate"])
def test_a_folder_that_is_not_gpt2_is_refused_naming_its_config(tmp_path, capsys, command):
    folder = _folder(tmp_path, {"model_type": "bert"})
    argv = [command, str(folder), *(["--task", "wikitext"] if command == "eval" else ["hello"])]
    assert main(argv) == 2
    said = capsys.readouterr().err
    assert f"{folder / 'config.json'}: model_type is 'bert', not 'gpt2'" in said and "zerolab export" in said
    assert sorted(p.name for p in folder.iterdir()) == ["config.json", "model.safetensors", "tokenizer.json"]


def test_a_gpt2_folder_without_its_tokenizer_says_how_to_save_one(tmp_path, capsys):
    folder = _folder(tmp_path, {"model_type": "gpt2"}, files=("model.safetensors",))
    assert main(["eval", str(folder), "--task", "hellaswag", "--data", "sample"]) == 2
    said = capsys.readouterr().err
    assert "no GPT-2 tokenizer" in said and "save_pretrained" in said


def test_a_folder_that_is_neither_run_nor_model_names_what_it_takes(tmp_path, capsys):
    assert main(["eval", str(tmp_path), "--task", "wikitext"]) == 2
    said = capsys.readouterr().err
    assert "not a run directory" in said and "zerolab export RUN_DIR --out DIR" in said


def test_val_needs_a_run_and_unknown_tasks_and_counts_are_named(tmp_path, capsys):
    folder = _folder(tmp_path, {"model_type": "gpt2"})
    assert main(["eval", str(folder), "--task", "val"]) == 2
    assert "--task val scores a run's own validation split" in capsys.readouterr().err
    assert main(["eval", str(folder), "--task", "wikitext,lambada"]) == 2
    assert "give one or more of val, wikitext, hellaswag" in capsys.readouterr().err
    assert main(["eval", str(folder), "--task", "wikitext", "--stride", "0"]) == 2
    assert "--stride 0: give a whole number of at least 1" in capsys.readouterr().err
    assert main(["generate", str(folder), "hi", "--temperature", "-1"]) == 2
    assert "--temperature -1.0: give 0 (greedy) or more" in capsys.readouterr().err


def test_a_missing_sample_is_named_with_the_fix(tmp_path, capsys, monkeypatch):
    folder = _folder(tmp_path, {"model_type": "gpt2"})
    monkeypatch.setattr(tasks, "WIKITEXT_SAMPLE", tmp_path / "gone.txt")
    assert main(["eval", str(folder), "--task", "wikitext", "--data", "sample"]) == 2
    said = capsys.readouterr().err
    assert f"{tmp_path / 'gone.txt'}: the evaluation sample shipped with zerolab is missing" in said
    assert "--data hub" in said


@pytest.mark.parametrize(
    ("split", "documents"),
    [("98,2,0", 151), ("969,30,1", 1000), ("1", 7), ("90,10", 3), ("969, 30, 1", 1000), ("90/10", 3)],
)
def test_the_validation_documents_are_megatrons_split(split, documents):
    """get_train_valid_test_split_ of Megatron-DeepSpeed's megatron/data/dataset_utils.py, worked by
    hand: the weights normalized, each range's size rounded, the rounding excess taken off the ends."""
    expected = {
        ("98,2,0", 151): [(0, 148), (148, 151), (151, 151)],
        ("969,30,1", 1000): [(0, 969), (969, 999), (999, 1000)],
        ("1", 7): [(0, 7), (7, 7), (7, 7)],
        ("90,10", 3): [(0, 3), (3, 3), (3, 3)],
        ("969, 30, 1", 1000): [(0, 969), (969, 999), (999, 1000)],
        ("90/10", 3): [(0, 3), (3, 3), (3, 3)],
    }
    assert split_ranges(split, documents) == expected[(split, documents)]


def test_the_hellaswag_sample_is_the_record_made_from_the_hubs_row_but_for_one_capital():
    first = json.loads(tasks.HELLASWAG_SAMPLE.read_text(encoding="utf-8").splitlines()[0])
    record = hellaswag_record(FIRST_HELLASWAG_ROW)
    assert record["context"] == "Roof shingle removal: A man is sitting on a roof. He"
    # the sample's extraction joined ctx as the dataset does, ctx_b not capitalized
    assert first["context"] == "Roof shingle removal: A man is sitting on a roof. he"
    assert {key: first[key] for key in ("endings", "label")} == {
        key: record[key] for key in ("endings", "label")
    }
    wikihow = {
        "activity_label": "Health",
        "ctx_a": "[header] How to rest [title] Sit down. [step] Breathe.",
        "ctx_b": "",
        "endings": [" a  b "],
        "label": 0,
    }
    assert hellaswag_record(wikihow)["context"] == "Health: How to rest. Sit down. Breathe."
    assert hellaswag_record(wikihow)["endings"] == ["a b"]
    lines = tasks.HELLASWAG_SAMPLE.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 101 and all(len(json.loads(line)["endings"]) == 4 for line in lines)
    assert tasks.WIKITEXT_SAMPLE.read_text(encoding="utf-8").startswith(" = Robert Boulter = \n")
