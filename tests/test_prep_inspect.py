"""`zerolab prep inspect` reports what a dataset holds and rejects a .bin/.idx that disagree."""

import shutil

from prep_helpers import FIXTURES, prep


def golden_pair(tmp_path, idx_name: str):
    shutil.copy(FIXTURES / "dolly151_text_document.bin", tmp_path / "d_text_document.bin")
    shutil.copy(FIXTURES / idx_name, tmp_path / "d_text_document.idx")
    return tmp_path / "d"


def test_inspect_prints_counts_and_decoded_documents(tmp_path, capsys):
    prefix = golden_pair(tmp_path, "dolly151_text_document.idx")
    assert prep("inspect", str(prefix), "--show", "1") == 0
    out = capsys.readouterr().out
    assert "documents: 151" in out and "tokens:    31,619" in out and "uint16" in out
    assert "Why is Citizen Kane considered the Best Film?" in out
    assert "OK" in out


def test_inspect_rejects_megatron_deepspeeds_index_that_leaves_out_the_eod(tmp_path, capsys):
    prefix = golden_pair(tmp_path, "dolly151_megatron-deepspeed-eod-bug.idx")
    assert prep("inspect", f"{prefix}_text_document") == 1
    out = capsys.readouterr().out
    assert "MISMATCH" in out and "31,468 tokens" in out


def test_inspect_detects_a_bin_changed_after_its_manifest(tmp_path, capsys):
    out = tmp_path / "dolly"
    assert prep("jsonl", str(FIXTURES / "dolly151_text.jsonl"), "--out", str(out)) == 0
    assert prep("inspect", str(out)) == 0
    data = bytearray((tmp_path / "dolly_text_document.bin").read_bytes())
    data[10] ^= 1
    (tmp_path / "dolly_text_document.bin").write_bytes(bytes(data))
    assert prep("inspect", str(out)) == 1
    assert "sha256" in capsys.readouterr().out


def test_inspect_of_a_truncated_bin_or_missing_prefix(tmp_path, capsys):
    prefix = golden_pair(tmp_path, "dolly151_text_document.idx")
    with open(f"{prefix}_text_document.bin", "r+b") as handle:
        handle.truncate(1000)
    assert prep("inspect", str(prefix)) == 1
    assert prep("inspect", str(tmp_path / "nothing")) == 2
