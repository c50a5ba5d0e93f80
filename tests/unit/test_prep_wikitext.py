"""`zerolab prep wikitext`: WikiText's articles as documents, from the dataset's own splits (the
shipped sample of WikiText-2, real text), resumable, and a clear exit 2 without the hub."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from prep_helpers import hub_dataset_copy, prep

from zerolab.backends.local import free_port
from zerolab.data_prep import wikitext
from zerolab.data_prep.indexed import read_document, read_index
from zerolab.data_prep.sources import START
from zerolab.data_prep.tokenizer import decode

SAMPLE = Path(__file__).resolve().parents[2] / "data_prep" / "samples" / "wikitext2_valid_head.tokens"
TEST_SAMPLE = Path(__file__).resolve().parents[2] / "zerolab" / "assets" / "eval" / "wikitext_test_sample.txt"
HEADING = re.compile(r"^ = [^=].* = $", re.MULTILINE)


def documents(prefix: str) -> list[str]:
    index = read_index(Path(f"{prefix}.idx"))
    return [decode(read_document(Path(f"{prefix}.bin"), index, i)[:-1]) for i in range(len(index))]


def articles_of(text: str) -> list[str]:
    """The articles of a WikiText text, cut at its headings, the blank lines at their ends dropped."""
    lines = text.splitlines(keepends=True)
    starts = [i for i, line in enumerate(lines) if HEADING.match(line.rstrip("\n"))]
    found = []
    for first, end in zip(starts, [*starts[1:], len(lines)], strict=True):
        body = lines[first:end]
        while not body[-1].strip():
            body.pop()
        found.append("".join(body))
    return found


def test_each_article_is_one_document_with_its_lines_as_they_are(tmp_path):
    out = tmp_path / "wt"
    assert prep("wikitext", "--train", str(SAMPLE), "--test", str(TEST_SAMPLE), "--out", str(out)) == 0
    train = documents(f"{out}_train_text_document")
    assert train == articles_of(SAMPLE.read_text(encoding="utf-8"))
    assert len(train) == 8 and train[0].startswith(" = Homarus gammarus = \n \n Homarus gammarus , known")
    test = documents(f"{out}_test_text_document")
    assert [doc.split("\n", 1)[0] for doc in test] == [" = Robert Boulter = ", " = Du Fu = "]
    assert test == articles_of(TEST_SAMPLE.read_text(encoding="utf-8"))
    assert not Path(f"{out}_valid_text_document.bin").exists()  # no --valid: no validation split


def hub_copy(tmp_path: Path, monkeypatch) -> Path:
    """A local copy of the hub's dataset, offline: its configuration's README and parquet files of
    one row per line (the sample as train, the test sample as validation and test)."""
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    splits = {"train": SAMPLE, "validation": TEST_SAMPLE, "test": TEST_SAMPLE}
    rows = {
        split: [{"text": line} for line in path.read_text(encoding="utf-8").splitlines(keepends=True)]
        for split, path in splits.items()
    }
    return hub_dataset_copy(tmp_path / "wikitext", "wikitext-2-raw-v1", rows)


def test_the_hubs_rows_give_the_files_documents(tmp_path, monkeypatch):
    copy = hub_copy(tmp_path, monkeypatch)
    hub, files = tmp_path / "hub", tmp_path / "files"
    assert prep("wikitext", "--version", "2", "--dataset", str(copy), "--out", str(hub)) == 0
    assert prep("wikitext", "--train", str(SAMPLE), "--valid", str(TEST_SAMPLE), "--out", str(files)) == 0
    for split in ("train", "valid"):
        assert documents(f"{hub}_{split}_text_document") == documents(f"{files}_{split}_text_document")
    assert documents(f"{hub}_test_text_document") == articles_of(TEST_SAMPLE.read_text(encoding="utf-8"))


def test_text_before_the_first_heading_and_crlf_lines(tmp_path):
    source = tmp_path / "wiki.train.raw"
    source.write_bytes(
        b"a preamble\r\n \r\n = One = \r\n text \r\n = = Section = = \r\n more \r\n \r\n = Two = \r\n end"
    )
    out = tmp_path / "wt"
    assert prep("wikitext", "--train", str(source), "--out", str(out)) == 0
    assert documents(f"{out}_train_text_document") == [
        "a preamble\r\n",
        " = One = \r\n text \r\n = = Section = = \r\n more \r\n",
        " = Two = \r\n end",
    ]


def test_a_file_resumes_after_any_batch_with_the_articles_not_yet_written(monkeypatch):
    monkeypatch.setattr(wikitext, "BATCH_RECORDS", 3)
    source = wikitext.WikiTextFile(SAMPLE)
    batches = list(source.batches(START))
    assert len(batches) == 3  # 8 articles, 3 a batch
    for done in range(len(batches)):
        resumed = [item for batch, _, _ in source.batches(batches[done][1]) for item in batch.items]
        assert resumed == [item for batch, _, _ in batches[done + 1 :] for item in batch.items], done
    lines = SAMPLE.read_bytes().splitlines(keepends=True)
    for batch, _, _ in batches:  # each article's number is its heading's line
        assert all(lines[number - 1].startswith(b" = ") for number, _ in batch.items)


def test_the_hub_resumes_after_any_batch_with_the_articles_not_yet_written(tmp_path, monkeypatch):
    source = wikitext.WikiTextHub("2", "train", str(hub_copy(tmp_path, monkeypatch)))
    monkeypatch.setattr(wikitext, "BATCH_RECORDS", 3)
    batches = list(source.batches(START))
    assert len(batches) == 3
    for done in range(len(batches)):
        resumed = [item for batch, _, _ in source.batches(batches[done][1]) for item in batch.items]
        assert resumed == [item for batch, _, _ in batches[done + 1 :] for item in batch.items], done


def test_without_the_hub_it_is_a_clear_exit_2_naming_the_files_to_give(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert prep("wikitext", "--version", "2", "--out", str(tmp_path / "wt")) == 2
    error = capsys.readouterr().err
    assert "could not load 'Salesforce/wikitext'" in error
    assert "wikitext-2-raw-v1.zip" in error and "--train wiki.train.raw" in error
    assert not list(tmp_path.glob("wt_*"))


def test_wikitext_comes_split_so_split_is_no_option(tmp_path, capsys):
    with pytest.raises(SystemExit) as stopped:
        prep("wikitext", "--split", "98,1,1", "--out", str(tmp_path / "wt"))
    assert stopped.value.code == 2 and "unrecognized arguments: --split" in capsys.readouterr().err


def test_a_missing_file_is_named_and_nothing_is_written(tmp_path, capsys):
    assert prep("wikitext", "--train", str(tmp_path / "wiki.train.raw"), "--out", str(tmp_path / "wt")) == 2
    assert "wiki.train.raw does not exist" in capsys.readouterr().err
    assert not list(tmp_path.glob("wt_*"))


def test_a_split_refused_leaves_the_others_unwritten(tmp_path, capsys):
    # valid refused (an empty file): train, read first and well, is not written either
    valid = tmp_path / "wiki.valid.raw"
    valid.write_text("")
    out = tmp_path / "out" / "wt"
    assert prep("wikitext", "--train", str(SAMPLE), "--valid", str(valid), "--out", str(out)) == 2
    assert f"{valid}: no documents to write" in capsys.readouterr().err
    # nothing: no .bin, .idx or manifest, no train shards, not even the folder the run made
    assert not out.parent.exists()
    valid.write_bytes(SAMPLE.read_bytes())
    assert prep("wikitext", "--train", str(SAMPLE), "--valid", str(valid), "--out", str(out)) == 0
    assert documents(f"{out}_train_text_document") == documents(f"{out}_valid_text_document")


def test_a_dataset_folder_that_does_not_exist_is_named_not_the_hub(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{free_port()}")  # nothing listens there
    missing = tmp_path / "wikitext-copy"
    assert prep("wikitext", "--version", "2", "--dataset", str(missing), "--out", str(tmp_path / "wt")) == 2
    error = capsys.readouterr().err
    assert f"--dataset {missing}: no such folder" in error and "did not answer" not in error
    assert "its README.md and the folder wikitext-2-raw-v1/ of its parquet files" in error
    assert not list(tmp_path.glob("wt_*"))
