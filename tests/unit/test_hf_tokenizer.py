"""data.tokenizer_type HFTokenizer: `zerolab prep --tokenizer-model FOLDER` writes a Hugging Face
tokenizer folder's ids (HF tokenizers' encode of its tokenizer.json, each document ended by its eos
token), its manifest names the folder, and recipes check it. Megatron's own HFTokenizer reading
them, and a training on them: tests/engine/test_hf_tokenizer_engine.py."""

from __future__ import annotations

import json

import numpy as np
from prep_helpers import SAMPLE, gpt2_hf_tokenizer, prep

from zerolab.cli import main
from zerolab.data_prep.indexed import read_index


def _ids(prefix) -> np.ndarray:
    index = read_index(prefix.with_name(prefix.name + ".idx"))
    return np.fromfile(prefix.with_name(prefix.name + ".bin"), dtype=index.dtype)


def test_a_folder_of_gpt2s_tokenizer_writes_gpt2s_ids(tmp_path):
    """The same tokenizer two ways (tiktoken from the bundled files; HF tokenizers from a folder)
    gives the same ids, end-of-document ids included; the manifest names HFTokenizer and its files."""
    folder = gpt2_hf_tokenizer(tmp_path / "gpt2-tokenizer")
    assert prep("dolly", "--input", str(SAMPLE), "--out", str(tmp_path / "bpe")) == 0
    assert (
        prep("dolly", "--input", str(SAMPLE), "--out", str(tmp_path / "hf"), "--tokenizer-model", str(folder))
        == 0
    )
    bpe, hf = tmp_path / "bpe_text_document", tmp_path / "hf_text_document"
    assert np.array_equal(_ids(bpe), _ids(hf)) and len(_ids(hf)) == 31_515
    facts = json.loads((tmp_path / "hf_text_document.manifest.json").read_text())["tokenizer"]
    assert (facts["type"], facts["vocab_size"], facts["eod_id"]) == ("HFTokenizer", 50257, 50256)
    assert set(facts["files"]) == {"tokenizer.json", "tokenizer_config.json"}


def test_a_folder_without_its_eos_token_or_files_is_refused_naming_it(tmp_path, capsys):
    folder = gpt2_hf_tokenizer(tmp_path / "tok")
    (folder / "tokenizer_config.json").write_text("{}")
    assert (
        prep("dolly", "--input", str(SAMPLE), "--out", str(tmp_path / "x"), "--tokenizer-model", str(folder))
        == 2
    )
    assert "names no eos_token that tokenizer.json has" in capsys.readouterr().err
    (folder / "tokenizer.json").unlink()
    assert (
        prep("dolly", "--input", str(SAMPLE), "--out", str(tmp_path / "x"), "--tokenizer-model", str(folder))
        == 2
    )
    assert "is no Hugging Face tokenizer folder: it lacks tokenizer.json" in capsys.readouterr().err
    assert not list(tmp_path.glob("x*"))


def test_a_recipe_reads_the_folder_and_its_dataset_must_be_prepared_with_it(tmp_path, capsys):
    folder = gpt2_hf_tokenizer(tmp_path / "tok")
    out = tmp_path / "hf"
    assert prep("dolly", "--input", str(SAMPLE), "--out", str(out), "--tokenizer-model", str(folder)) == 0
    hf = [
        "data.tokenizer_type=HFTokenizer",
        f"data.tokenizer_model={folder}",
        f"data.path={out}_text_document",
    ]
    capsys.readouterr()
    assert main(["render", "cpu/tiny_dp", *hf, "--json"]) == 0
    argv = json.loads(capsys.readouterr().out)["argv"]
    assert argv[argv.index("--tokenizer-type") + 1] == "HFTokenizer"
    assert argv[argv.index("--tokenizer-model") + 1] == str(folder) and "--vocab-file" not in argv
    assert prep("dolly", "--input", str(SAMPLE), "--out", str(tmp_path / "bpe")) == 0
    capsys.readouterr()
    gpt2_data = [*hf[:2], f"data.path={tmp_path / 'bpe'}_text_document"]
    assert main(["launch", "cpu/tiny_dp", *gpt2_data, "--dry-run"]) in (0, 2)
    said = capsys.readouterr()
    mismatch = (
        "was tokenized with GPT2BPETokenizer (its manifest), the recipe trains with data.tokenizer_type"
    )
    assert f"{mismatch} HFTokenizer" in said.out + said.err
