"""Every input form gives the same documents: .jsonl, .json, .parquet, HF datasets, text."""

import gzip
import json

import numpy as np
import pytest
from prep_helpers import FIXTURES, SAMPLE, manifest, prep, same_bytes

from zerolab.backends.local import free_port
from zerolab.data_prep.indexed import read_document, read_index, token_dtype, write_index
from zerolab.data_prep.tokenizer import decode


def dolly_reference(tmp_path):
    out = tmp_path / "ref"
    assert prep("dolly", "--input", str(SAMPLE), "--out", str(out)) == 0
    return f"{out}_text_document.bin"


def test_dolly_json_array_and_parquet_match_jsonl(tmp_path):
    # pyarrow here, not at the top: heavy (0.4 s), loaded only for a parquet source
    import pyarrow as pa
    import pyarrow.parquet as pq

    reference = dolly_reference(tmp_path)
    records = [json.loads(line) for line in SAMPLE.read_text().splitlines()]
    (tmp_path / "dolly.json").write_text(json.dumps(records))
    pq.write_table(pa.Table.from_pylist(records), tmp_path / "dolly.parquet")
    for name in ("dolly.json", "dolly.parquet"):
        out = tmp_path / name.replace(".", "_")
        assert prep("dolly", "--input", str(tmp_path / name), "--out", str(out)) == 0
        assert same_bytes(f"{out}_text_document.bin", reference)
        assert manifest(out)["records_read"] == 151


def test_dolly_through_hf_datasets_from_a_local_dataset_directory(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    reference = dolly_reference(tmp_path)
    dataset_dir = tmp_path / "dolly-dataset"
    dataset_dir.mkdir()
    (dataset_dir / "train.jsonl").write_bytes(SAMPLE.read_bytes())
    out = tmp_path / "hf"
    assert prep("dolly", "--dataset", str(dataset_dir), "--out", str(out)) == 0
    assert same_bytes(f"{out}_text_document.bin", reference)
    assert manifest(out)["source"] == {"dataset": str(dataset_dir), "split": "train", "streaming": False}


@pytest.mark.parametrize("corpus", ["dolly", "openwebtext"], ids=["loaded", "streamed"])
@pytest.mark.parametrize("fault", ["cut short", "damaged"])
def test_a_bad_compressed_file_in_a_dataset_folder_is_named(tmp_path, monkeypatch, capsys, corpus, fault):
    """Not "could not load through Hugging Face datasets (EOFError ...)": the file and the fix."""
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    dataset_dir = tmp_path / "dataset"
    dataset_dir.mkdir()
    data = bytearray(gzip.compress(SAMPLE.read_bytes()))
    if fault == "cut short":
        data = data[: len(data) // 2]
    else:
        for at in range(len(data) // 3, len(data) // 2, 101):
            data[at] ^= 0x5A
    path = dataset_dir / "train.jsonl.gz"
    path.write_bytes(bytes(data))
    assert prep(corpus, "--dataset", str(dataset_dir), "--out", str(tmp_path / "out" / "x")) == 2
    error = capsys.readouterr().err
    assert f"{path} is {fault}" in error and "download or copy it again" in error
    assert "datasets" not in error
    assert not (tmp_path / "out").exists()


def test_unreachable_hub_is_a_clear_exit_2(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert prep("openwebtext", "--out", str(tmp_path / "owt")) == 2
    error = capsys.readouterr().err
    assert "could not load 'Skylion007/openwebtext'" in error and "--input" in error
    assert not list(tmp_path.glob("owt_text_document.*"))


def test_a_hub_that_does_not_answer_is_named_at_once_and_no_folder_is_left(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{free_port()}")  # nothing listens there
    assert prep("dolly", "--out", str(tmp_path / "new" / "dolly")) == 2
    error = capsys.readouterr().err
    assert "the Hugging Face hub (127.0.0.1:" in error and "no copy is cached here" in error
    assert "--input" in error and not (tmp_path / "new").exists()


def test_split_deals_every_document_once_in_the_given_proportions(tmp_path):
    source = FIXTURES / "dolly151_text.jsonl"
    out = tmp_path / "d"
    assert prep("jsonl", str(source), "--out", str(out), "--split", "8,1,1") == 0
    counts = {
        name: manifest(tmp_path / f"d_{name}")["documents_written"] for name in ("train", "valid", "test")
    }
    assert counts == {"train": 121, "valid": 15, "test": 15}
    texts = sorted(
        decode(read_document(f"{tmp_path}/d_{name}_text_document.bin", index, i))
        for name in counts
        for index in [read_index(f"{tmp_path}/d_{name}_text_document.idx")]
        for i in range(len(index))
    )
    expected = sorted(json.loads(line)["text"] + "<|endoftext|>" for line in source.read_text().splitlines())
    assert texts == expected


def test_text_files_one_document_per_file_or_per_line(tmp_path):
    (tmp_path / "a.txt").write_text("First file.\nSecond line.\n")
    (tmp_path / "b.txt").write_text("Another file.")
    files = [str(tmp_path / "a.txt"), str(tmp_path / "b.txt")]
    assert prep("text", *files, "--out", str(tmp_path / "per_file")) == 0
    assert prep("text", *files, "--out", str(tmp_path / "per_line"), "--document", "line") == 0
    for name, expected in (
        ("per_file", ["First file.\nSecond line.\n", "Another file."]),
        ("per_line", ["First file.", "Second line.", "Another file."]),
    ):
        bin_path = tmp_path / f"{name}_text_document.bin"
        index = read_index(tmp_path / f"{name}_text_document.idx")
        got = [decode(read_document(bin_path, index, i)) for i in range(len(index))]
        assert got == [text + "<|endoftext|>" for text in expected]


def test_non_utf8_text_file_names_its_line(tmp_path, capsys):
    (tmp_path / "bad.txt").write_bytes(b"fine\nalso fine\nnot \xff fine\n")
    assert prep("text", str(tmp_path / "bad.txt"), "--out", str(tmp_path / "o"), "--document", "line") == 2
    assert f"{tmp_path / 'bad.txt'}:3: bytes that are not UTF-8" in capsys.readouterr().err


def test_int32_tokens_for_large_vocabularies(tmp_path):
    assert token_dtype(50257) == np.uint16 and token_dtype(128000) == np.int32
    tokens = np.array([70000, 1, 2, 99999, 5], dtype=np.int32)
    sizes = np.array([3, 2], dtype=np.int32)
    tokens.tofile(tmp_path / "x.bin")
    write_index(tmp_path / "x.idx", lambda: [sizes], 2, np.int32)
    index = read_index(tmp_path / "x.idx")
    assert index.dtype == np.int32 and list(index.pointers) == [0, 12] and list(index.doc_idx) == [0, 1, 2]
    assert read_document(tmp_path / "x.bin", index, 1).tolist() == [99999, 5]
