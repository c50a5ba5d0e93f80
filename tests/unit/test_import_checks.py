"""What `zerolab import` and model.init_from refuse, before the engine's Python starts: a folder that
is not a GPT-2 the engine computes the same way, a tensor-parallel size the heads do not divide, a
missing tokenizer, an output folder that exists, a hub name that cannot be fetched (exit 2, the
path and the fix named, nothing written); and a recipe whose layout, shape, padded vocabulary,
tokenizer or ZeRO stage does not fit the imported weights (launch refuses naming the key and the
fix; render warns and prints the engine's fine-tuning load)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from zerolab.cli import main
from zerolab.imported import (
    ImportedLayout,
    ImportedShape,
    ImportedWeights,
    layout_tag,
    read_manifest,
    tokenizer_digest,
    write_manifest,
)
from zerolab.locations import REPO_ROOT

TINY = "recipes/cpu/tiny_dp.yaml"
ASSETS = REPO_ROOT / "zerolab" / "assets" / "gpt2"
GPT2_CONFIG = {"model_type": "gpt2", "n_layer": 2, "n_embd": 64, "n_head": 4, "n_positions": 128}


def _hf_folder(folder: Path, config: dict | None = None, *, tokenizer: bool = True) -> Path:
    """A Hugging Face GPT-2 directory as far as zerolab reads it before the engine starts."""
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(GPT2_CONFIG if config is None else config))
    (folder / "model.safetensors").write_bytes(b"\x02\0\0\0\0\0\0\0{}")  # safetensors of no tensors
    if tokenizer:
        for name in ("vocab.json", "merges.txt"):
            (folder / name).write_bytes((ASSETS / name).read_bytes())
    return folder


@pytest.mark.parametrize(
    ("config", "tokenizer", "argv", "said"),
    [
        ({"model_type": "bert"}, True, [], "model_type 'bert', not 'gpt2'"),
        (GPT2_CONFIG | {"activation_function": "relu"}, True, [], "activation_function='relu'"),
        (GPT2_CONFIG | {"n_inner": 100}, True, [], "n_inner=100"),
        (GPT2_CONFIG | {"layer_norm_epsilon": 1e-6}, True, [], "layer_norm_epsilon=1e-06"),
        (GPT2_CONFIG | {"n_layer": "two"}, True, [], "a shape that is not whole numbers (num_layers:"),
        (GPT2_CONFIG, False, [], "no tokenizer (tokenizer.json, or vocab.json and merges.txt)"),
        (GPT2_CONFIG, True, ["--parallel", "3x1"], "4 attention heads do not divide by tensor parallel 3"),
        (GPT2_CONFIG, True, ["--parallel", "1x3"], "2 layers do not divide by pipeline parallel 3"),
        (GPT2_CONFIG, True, ["--make-vocab-size-divisible-by", "0"], "give a whole number of at least 1"),
    ],
)
def test_a_model_the_engine_would_not_compute_the_same_is_refused(
    config, tokenizer, argv, said, tmp_path, capsys
):
    source = _hf_folder(tmp_path / "hf", config, tokenizer=tokenizer)
    out = tmp_path / "imported"
    assert main(["import", str(source), "--out", str(out), *argv]) == 2
    err = capsys.readouterr().err
    assert said in err, err
    assert not out.exists() and [p.name for p in tmp_path.iterdir()] == ["hf"]


def test_a_folder_without_config_and_an_output_that_exists_are_named(tmp_path, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["import", str(empty), "--out", str(tmp_path / "out")]) == 2
    assert f"{empty / 'config.json'} not found" in capsys.readouterr().err
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "mine.txt").write_text("kept")
    assert main(["import", str(_hf_folder(tmp_path / "hf")), "--out", str(taken)]) == 2
    assert f"--out {taken}: already exists; give a new folder" in capsys.readouterr().err
    assert (taken / "mine.txt").read_text() == "kept"


def test_a_hub_name_that_cannot_be_fetched_says_so(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    assert main(["import", "openai-community/gpt2", "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert (
        "MODEL openai-community/gpt2: no such directory here, and HF_HUB_OFFLINE is set, nor has this "
        "machine a copy in its Hugging Face cache" in err
    )
    assert not (tmp_path / "out").exists()


def test_a_bad_layout_word_is_an_argument_error(tmp_path, capsys):
    with pytest.raises(SystemExit) as exited:
        main(["import", str(tmp_path), "--out", str(tmp_path / "out"), "--parallel", "2by2"])
    assert exited.value.code == 2 and "give TENSORxPIPELINE, e.g. 1x1 or 2x2" in capsys.readouterr().err


def _imported(folder: Path, *layouts: tuple[int, int], divisible_by: int = 1) -> Path:
    """A `zerolab import` folder's manifest for the tiny GPT-2 and the bundled tokenizer."""
    folder.mkdir()
    write_manifest(
        folder,
        ImportedWeights(
            source="tiny-gpt2",
            shape=ImportedShape(
                num_layers=2,
                hidden_size=64,
                num_attention_heads=4,
                max_position_embeddings=128,
                vocab_size=50257,
            ),
            make_vocab_size_divisible_by=divisible_by,
            tokenizer_sha256=tokenizer_digest(ASSETS / "vocab.json", ASSETS / "merges.txt"),
            layouts={
                layout_tag(t, p): ImportedLayout(tensor=t, pipeline=p, padded_vocab_size=50257 + (t > 1))
                for t, p in layouts
            },
        ),
    )
    return folder


def test_the_manifest_reads_back_and_a_broken_one_is_named(tmp_path):
    folder = _imported(tmp_path / "w", (1, 1))
    assert read_manifest(folder).layout(1, 1).padded_vocab_size == 50257
    assert read_manifest(folder).layout(2, 1) is None
    (folder / "zerolab-import.json").write_text('{"source": 1}')
    with pytest.raises(ValueError, match="not a manifest of `zerolab import`"):
        read_manifest(folder)


def test_render_prints_the_engines_fine_tuning_load_of_the_layout(tmp_path, capsys):
    folder = _imported(tmp_path / "w", (1, 1), (2, 1))
    argv = ["render", TINY, f"model.init_from={folder}", "model.make_vocab_size_divisible_by=1"]
    assert main([*argv, "parallel.tensor=2", "--json"]) == 0
    launched = json.loads(capsys.readouterr().out)["argv"]
    at = launched.index("--load")
    assert launched[at : at + 5] == ["--load", str(folder), "--load-tag", "tp2_pp1", "--finetune"]


@pytest.mark.parametrize(
    ("overrides", "said"),
    [
        (["parallel.tensor=2"],
         "holds the layouts tp1_pp1, not tp2_pp1 (parallel.tensor=2, parallel.pipeline=1)"),
        (["model.num_layers=4"],
         "model.num_layers=4: the weights in {folder} have num_layers 2; set model.num_layers=2"),
        ([],
         "model.make_vocab_size_divisible_by=128: pads the vocabulary to 50304 rows, the weights in "
         "{folder} to 50257; set model.make_vocab_size_divisible_by=1"),
        (["data.vocab_file={tmp}/vocab.json"],
         "are not the tokenizer the weights in {folder} belong to; set data.vocab_file={folder}/vocab.json"),
    ],
)  # fmt: skip
def test_launch_refuses_a_recipe_that_does_not_fit_the_weights(overrides, said, tmp_path, capsys, dataset):
    folder = _imported(tmp_path / "w", (1, 1))
    vocab = {"a": 0, **{f"t{i}": i + 1 for i in range(50256)}}  # 50257 entries, not GPT-2's tokens
    (tmp_path / "vocab.json").write_text(json.dumps(vocab))
    fill = {"folder": folder, "tmp": tmp_path}
    padding = [] if not overrides or "divisible" in said else ["model.make_vocab_size_divisible_by=1"]
    words = [TINY, f"data.path={dataset}", f"model.init_from={folder}", *padding]
    words += [word.format(**fill) for word in overrides]
    run_dir = tmp_path / "run"
    assert main(["launch", *words, "--run-dir", str(run_dir)]) == 2
    assert said.format(**fill) in capsys.readouterr().err
    assert not run_dir.exists()


def test_a_folder_that_is_not_an_import_is_named_with_the_command_that_makes_one(tmp_path, capsys, dataset):
    words = [
        TINY,
        f"data.path={dataset}",
        f"model.init_from={tmp_path}",
        "model.make_vocab_size_divisible_by=1",
    ]
    assert main(["launch", *words, "--run-dir", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    # the folder exists, and the import writes new folders only: a new one, and the key pointed at it
    assert "not a folder written by `zerolab import`" in err
    assert (
        "import the weights into a new folder with `zerolab import MODEL --out imports/NAME` and set "
        "model.init_from=imports/NAME" in err
    )


def test_a_continued_recipe_without_its_weights_names_the_command_that_writes_them(tmp_path, capsys, dataset):
    # the shipped CPU twin, its data present: launch refuses before anything runs, naming the recipe's
    # own model.import_command (the demo's export, then its import) rather than a generic one
    words = ["continued/cpu/tiny_wikitext_dp", "data.path=null", f"data.train_path={dataset}"]
    words += [f"model.init_from={tmp_path / 'missing'}"]
    assert main(["launch", *words, "--run-dir", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert f"model.init_from: {tmp_path / 'missing'}/zerolab-import.json not found" in err
    assert (
        "write it with `zerolab export logs/sweeps/demo/zero-z0 --out exports/tiny-demo && zerolab import"
        in err
    )
    assert not (tmp_path / "run").exists()
