"""Byte identity with the golden files made by Megatron-DeepSpeed's and GPT-NeoX's tools."""

import gzip
import json

import pytest
from prep_helpers import FIXTURES, SAMPLE, manifest, prep, same_bytes

from zerolab.checksums import sha256_of
from zerolab.data_prep.indexed import read_document, read_index
from zerolab.data_prep.tokenizer import decode


@pytest.mark.parametrize("workers", [1, 2])
def test_dolly_text_jsonl_matches_golden_for_any_worker_count(tmp_path, workers):
    out = tmp_path / "dolly"
    assert (
        prep("jsonl", str(FIXTURES / "dolly151_text.jsonl"), "--out", str(out), "--workers", str(workers))
        == 0
    )
    assert same_bytes(f"{out}_text_document.bin", FIXTURES / "dolly151_text_document.bin")
    assert same_bytes(f"{out}_text_document.idx", FIXTURES / "dolly151_text_document.idx")


def test_zstd_openwebtext_in_many_shards_matches_golden(tmp_path):
    out = tmp_path / "owt"
    args = [
        "--input",
        str(FIXTURES / "owt1000.jsonl.zst"),
        "--out",
        str(out),
        "--workers",
        "2",
        "--shard-mb",
        "0.5",
    ]
    assert prep("openwebtext", *args) == 0
    assert same_bytes(f"{out}_text_document.bin", FIXTURES / "owt1000_text_document.bin")
    assert same_bytes(f"{out}_text_document.idx", FIXTURES / "owt1000_text_document.idx")
    facts = manifest(out)
    assert facts["records_read"] == facts["documents_written"] == 1000
    assert facts["tokens_written"] == (FIXTURES / "owt1000_text_document.bin").stat().st_size // 2
    assert facts["files"]["bin"]["sha256"] == sha256_of(FIXTURES / "owt1000_text_document.bin")
    assert facts["files"]["idx"]["sha256"] == sha256_of(FIXTURES / "owt1000_text_document.idx")
    assert facts["source"]["files"][0]["compression"] == "zstd"


def test_dolly_with_empty_fields_kept_matches_golden_from_gzip(tmp_path):
    compressed = tmp_path / "dolly151.jsonl.gz"
    compressed.write_bytes(gzip.compress(SAMPLE.read_bytes()))
    out = tmp_path / "dolly"
    assert prep("dolly", "--input", str(compressed), "--out", str(out), "--keep-empty-fields") == 0
    assert same_bytes(f"{out}_text_document.bin", FIXTURES / "dolly151_text_document.bin")
    assert same_bytes(f"{out}_text_document.idx", FIXTURES / "dolly151_text_document.idx")


def test_dolly_default_leaves_empty_context_out(tmp_path):

    out = tmp_path / "dolly"
    assert prep("dolly", "--input", str(SAMPLE), "--out", str(out)) == 0
    records = [json.loads(line) for line in SAMPLE.read_text().splitlines()]
    index = read_index(f"{out}_text_document.idx")
    assert len(index) == 151
    for i in (0, 1, len(records) - 1):
        record = records[i]
        expected = "\n".join(p for p in (record["context"], record["instruction"], record["response"]) if p)
        assert decode(read_document(f"{out}_text_document.bin", index, i)) == expected + "<|endoftext|>"
