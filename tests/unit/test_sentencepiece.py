"""data.tokenizer_type GPTSentencePieceTokenizer (Llama's tokenizer.model): `zerolab prep --tokenizer-model`
writes the model's ids, each document ended by its eos id; a recipe renders the model and no GPT-2 files,
takes model.vocab_size from its pieces, and refuses a dataset tokenized with another tokenizer, keys
that do not belong to its type, a GPT-2 export and imported GPT-2 weights. The training on the real
engine: tests/engine/test_sentencepiece_engine.py."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import sentencepiece
from prep_helpers import SAMPLE, manifest, prep, train_sentencepiece

from zerolab.checksums import sha256_of
from zerolab.cli import main
from zerolab.data_prep.indexed import read_document, read_index
from zerolab.rundir import RECIPE_END

TINY = "cpu/tiny_dp"


def sentencepiece_keys(model: Path, dataset: str) -> list[str]:
    """The overrides that train cpu/tiny_dp with the SentencePiece model on its dataset."""
    return [
        "data.tokenizer_type=GPTSentencePieceTokenizer",
        f"data.tokenizer_model={model}",
        f"data.path={dataset}",
        "model.vocab_size=1000",
    ]


def test_prep_writes_the_models_ids_each_document_ended_by_its_eos(sentencepiece_dataset):
    model, prefix = sentencepiece_dataset
    processor = sentencepiece.SentencePieceProcessor(model_file=str(model))
    records = [json.loads(line) for line in SAMPLE.read_text().splitlines()]
    texts = ["\n".join(record[key] for key in ("context", "instruction", "response") if record[key])
             for record in records]  # fmt: skip
    index = read_index(Path(f"{prefix}.idx"))
    assert index.dtype == np.uint16 and len(index) == len(texts)
    for number in (0, 1, len(texts) - 1):
        document = read_document(Path(f"{prefix}.bin"), index, number).tolist()
        assert document == [*processor.encode(texts[number]), processor.eos_id()]
    facts = manifest(Path(prefix.removesuffix("_text_document")))["tokenizer"]
    assert facts["type"] == "GPTSentencePieceTokenizer"
    assert facts["vocab_size"] == 1000 and facts["eod_id"] == 2
    assert facts["files"] == {"tokenizer.model": sha256_of(model)}


def test_a_file_that_is_not_a_sentencepiece_model_is_refused_before_anything_is_written(tmp_path, capsys):
    not_a_model = tmp_path / "vocab.json"
    not_a_model.write_text("{}")
    out = tmp_path / "out" / "dolly"
    assert (
        prep("dolly", "--input", str(SAMPLE), "--out", str(out), "--tokenizer-model", str(not_a_model)) == 2
    )
    assert f"--tokenizer-model {not_a_model} is not a SentencePiece model" in capsys.readouterr().err
    missing = tmp_path / "nowhere.model"
    assert prep("dolly", "--input", str(SAMPLE), "--out", str(out), "--tokenizer-model", str(missing)) == 2
    assert f"--tokenizer-model {missing}: no such file" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_a_record_that_is_not_unicode_is_skipped_as_with_gpt2(tmp_path, sentencepiece_dataset):
    model, _ = sentencepiece_dataset
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text('{"text": "fine"}\n{"text": "a \\ud800 lone surrogate"}\n')
    out = tmp_path / "c"
    assert (
        prep("jsonl", str(corpus), "--out", str(out), "--tokenizer-model", str(model), "--on-error", "skip")
        == 0
    )
    assert manifest(out)["skipped_records"]["by_reason"] == {"invalid Unicode": 1}


def test_inspect_decodes_with_the_manifests_model_and_shows_ids_without_it(
    tmp_path, sentencepiece_dataset, capsys
):
    model, prefix = sentencepiece_dataset
    assert prep("inspect", prefix, "--show", "1") == 0
    said = capsys.readouterr().out
    assert "Why is Citizen Kane considered the Best Film?" in said
    copy = tmp_path / "copy"
    copy.mkdir()
    for suffix in (".bin", ".idx", ".manifest.json"):
        shutil.copy(f"{prefix}{suffix}", copy / f"dolly_text_document{suffix}")
    shutil.copy(model, copy / "tokenizer.model")  # beside the dataset: found there
    assert prep("inspect", str(copy / "dolly"), "--show", "1") == 0
    assert "Why is Citizen Kane" in capsys.readouterr().out
    (copy / "tokenizer.model").unlink()
    manifest_file = copy / "dolly_text_document.manifest.json"
    facts = json.loads(manifest_file.read_text())
    facts["tokenizer"]["model_path"] = str(tmp_path / "moved.model")
    manifest_file.write_text(json.dumps(facts))
    assert prep("inspect", str(copy / "dolly"), "--show", "1") == 0
    said = capsys.readouterr().out
    assert "documents shown as ids" in said and "Citizen" not in said


def test_a_sentencepiece_recipe_renders_its_model_and_no_gpt2_files(sentencepiece_dataset, capsys):
    model, prefix = sentencepiece_dataset
    assert main(["render", TINY, *sentencepiece_keys(model, prefix), "--json"]) == 0
    argv = json.loads(capsys.readouterr().out)["argv"]
    assert argv[argv.index("--tokenizer-type") + 1] == "GPTSentencePieceTokenizer"
    assert argv[argv.index("--tokenizer-model") + 1] == str(model)
    assert "--vocab-file" not in argv and "--merge-file" not in argv


def test_model_vocab_size_must_be_the_models_pieces(sentencepiece_dataset, capsys):
    model, prefix = sentencepiece_dataset
    assert main(["render", TINY, *sentencepiece_keys(model, prefix), "model.vocab_size=50257", "--json"]) == 2
    said = capsys.readouterr().err
    assert f"{model} has 1000 entries" in said and "set model.vocab_size=1000" in said
    assert f"data.tokenizer_model='{model}'" in said


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        (
            ["data.tokenizer_type=GPTSentencePieceTokenizer"],
            [
                "GPTSentencePieceTokenizer reads a SentencePiece model (tokenizer.model), and "
                "data.tokenizer_model is null"
            ],
        ),
        (
            ["data.tokenizer_model=tokenizer.model"],
            [
                "data.tokenizer_model tokenizer.model: a SentencePiece model or a Hugging Face folder, which "
                "GPT2BPETokenizer does not"
            ],
        ),
        (
            [
                "data.tokenizer_type=GPTSentencePieceTokenizer",
                "data.tokenizer_model=t.model",
                "data.vocab_file=v.json",
            ],
            ["data.vocab_file: GPT-2's BPE files, which GPTSentencePieceTokenizer does not read"],
        ),
        (
            ["data.tokenizer_type=HFTokenizer"],
            ["HFTokenizer reads a Hugging Face tokenizer folder, and data.tokenizer_model is null"],
        ),
        (
            ['extra.megatron_args=[--num-key-value-heads,"2"]'],
            ["--num-key-value-heads 2 with 4 attention heads", "grouped-query attention stops at the first"],
        ),
    ],
    ids=["no model", "a model for GPT-2", "GPT-2 files for a model", "no folder", "grouped-query attention"],
)
def test_tokenizer_keys_of_another_type_are_refused(overrides, expected, capsys):
    assert main(["render", TINY, *overrides, "--json"]) == 2
    said = capsys.readouterr().err
    for text in expected:
        assert text in said


def test_launch_refuses_a_dataset_tokenized_with_another_tokenizer(
    tmp_path, sentencepiece_dataset, dataset, capsys
):
    model, prefix = sentencepiece_dataset
    run_dir = tmp_path / "run"
    assert main(["launch", TINY, f"data.path={prefix}", "--run-dir", str(run_dir)]) == 2
    said = capsys.readouterr().err
    assert f"{prefix} was tokenized with GPTSentencePieceTokenizer (tokenizer.model) (its manifest)" in said
    assert "set data.tokenizer_type and data.tokenizer_model to the dataset's" in said
    assert main(["launch", TINY, *sentencepiece_keys(model, dataset), "--run-dir", str(run_dir)]) == 2
    said = capsys.readouterr().err
    assert f"{dataset} was tokenized with GPT2BPETokenizer (its manifest)" in said
    assert f"--tokenizer-model {model} --force`" in said
    other = train_sentencepiece(tmp_path, vocab_size=1000 - 1)
    keys = [*sentencepiece_keys(other, prefix), "model.vocab_size=999"]
    assert main(["launch", TINY, *keys, "--run-dir", str(run_dir)]) == 2
    assert f"data.tokenizer_model {other}: its ids would be other words" in capsys.readouterr().err
    assert not run_dir.exists()


def test_a_sentencepiece_run_is_not_exported_as_gpt2(tmp_path, sentencepiece_dataset, capsys):
    model, prefix = sentencepiece_dataset
    run = tmp_path / "run"
    (run / "checkpoints" / "global_step4").mkdir(parents=True)
    (run / "run.json").write_text('{"name": "tiny"}')
    recipe = (Path(__file__).resolve().parents[2] / "recipes" / "cpu" / "tiny_dp.yaml").read_text()
    data = (
        f"data:\n  tokenizer_type: GPTSentencePieceTokenizer\n  tokenizer_model: {model}\n  path: {prefix}\n"
    )
    (run / "recipe.yaml").write_text(f"{recipe}{data}model:\n  vocab_size: 1000\n{RECIPE_END}\n")
    assert main(["export", str(run), "--out", str(tmp_path / "hf")]) == 2
    said = capsys.readouterr().err
    assert (
        "trained with data.tokenizer_type GPTSentencePieceTokenizer" in said and "nothing is exported" in said
    )
    assert not (tmp_path / "hf").exists()


def test_the_hint_for_missing_data_prepares_it_with_the_recipes_model(
    tmp_path, sentencepiece_dataset, capsys
):
    model, _ = sentencepiece_dataset
    missing = tmp_path / "corpus_text_document"
    assert (
        main(["launch", TINY, *sentencepiece_keys(model, str(missing)), "--run-dir", str(tmp_path / "r")])
        == 2
    )
    said = capsys.readouterr().err
    assert f"`zerolab prep CORPUS --out {tmp_path / 'corpus'} --tokenizer-model {model}`" in said
    assert not (tmp_path / "r").exists()
