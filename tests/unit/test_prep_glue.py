"""`zerolab prep glue TASK`: a GLUE task's splits, read through Hugging Face `datasets` from a copy of
the hub's nyu-mll/glue made of the shipped WNLI sample (real rows), into the files the fine-tuning
loop reads; the test split left out; an existing file, an unknown task, an unreachable hub and a
malformed row each a clear error."""

from __future__ import annotations

import json
import resource
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from prep_helpers import hub_dataset_copy, prep

from zerolab.backends.local import free_port
from zerolab.contracts import split_file, task_splits
from zerolab.finetune.glue import glue_task
from zerolab.locations import REPO_ROOT
from zerolab.rank.finetune_inputs import InputError, read_split

SAMPLES = REPO_ROOT / "data_prep" / "samples" / "glue"
WNLI = glue_task("wnli")


def rows_of(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def hub_copy(tmp_path: Path, monkeypatch) -> Path:
    """A local copy shaped as the hub's nyu-mll/glue with the WNLI sample as its train and
    validation splits and a test split labelled -1, as GLUE's."""
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    validation = rows_of(SAMPLES / "wnli_validation.jsonl")
    splits = {
        "train": rows_of(SAMPLES / "wnli_train.jsonl"),
        "validation": validation,
        "test": [{**row, "label": -1} for row in validation],
    }
    return hub_dataset_copy(tmp_path / "glue", "wnli", splits)


def test_the_hubs_splits_become_the_loops_files_row_for_row(tmp_path, monkeypatch, capsys):
    copy = hub_copy(tmp_path, monkeypatch)
    out = tmp_path / "data"
    assert prep("glue", "wnli", "--dataset", str(copy), "--out", str(out)) == 0
    assert sorted(p.name for p in out.iterdir()) == ["wnli_train.jsonl", "wnli_validation.jsonl"]  # no test
    for split in ("train", "validation"):
        written = split_file(out, WNLI, split)
        assert written.read_bytes() == (SAMPLES / f"wnli_{split}.jsonl").read_bytes()
        assert read_split(written, WNLI) == rows_of(SAMPLES / f"wnli_{split}.jsonl")
    assert f"wnli from {copy} into {out}: train 64 rows, validation 32 rows" in capsys.readouterr().out


def test_mnli_is_scored_on_its_matched_and_mismatched_splits():
    mnli = glue_task("MNLI")
    assert [split_file("data", mnli, split).name for split in task_splits(mnli)] == [
        "mnli_train.jsonl",
        "mnli_validation_matched.jsonl",
        "mnli_validation_mismatched.jsonl",
    ]


def test_an_existing_file_is_refused_and_left_as_it_was(tmp_path, monkeypatch, capsys):
    copy = hub_copy(tmp_path, monkeypatch)
    out = tmp_path / "data"
    out.mkdir()
    (out / "wnli_validation.jsonl").write_text("mine\n")
    assert prep("glue", "wnli", "--dataset", str(copy), "--out", str(out)) == 2
    error = capsys.readouterr().err
    assert "wnli_validation.jsonl exists" in error and "--out" in error
    assert [p.name for p in out.iterdir()] == ["wnli_validation.jsonl"]
    assert (out / "wnli_validation.jsonl").read_text() == "mine\n"


def test_an_unknown_task_names_the_closest(capsys):
    assert prep("glue", "sst-2", "--out", "unused") == 2
    assert "no GLUE task `sst-2`; did you mean `sst2`?" in capsys.readouterr().err


def test_without_the_hub_or_a_copy_the_error_says_how_to_do_without(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert prep("glue", "rte", "--out", str(tmp_path / "data")) == 2
    error = capsys.readouterr().err
    assert "could not load 'nyu-mll/glue'" in error and "--dataset" in error
    assert not (tmp_path / "data").exists()


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ('{"sentence1": "a", "label": 1}', "wnli_train.jsonl:2: no `sentence2`"),
        ("not json", "wnli_train.jsonl:2: not JSON"),
    ],
)
def test_a_malformed_row_is_named_by_file_and_line(tmp_path, line, expected):
    path = tmp_path / "wnli_train.jsonl"
    path.write_text('{"sentence1": "a", "sentence2": "b", "label": 0}\n' + line + "\n")
    with pytest.raises(InputError, match=expected):
        read_split(path, WNLI)


@pytest.mark.parametrize("out", ["notes.txt", "notes.txt/glue"])
def test_an_out_taken_by_a_file_is_refused_before_anything_is_read(tmp_path, monkeypatch, capsys, out):
    copy = hub_copy(tmp_path, monkeypatch)
    (tmp_path / "notes.txt").write_text("mine\n")
    assert prep("glue", "wnli", "--dataset", str(copy), "--out", str(tmp_path / out)) == 2
    error = capsys.readouterr().err
    assert f"--out: {tmp_path}/notes.txt is a file, where the folder of the files goes" in error
    assert (tmp_path / "notes.txt").read_text() == "mine\n"


def unreachable_hub(tmp_path, monkeypatch) -> None:
    """A hub that does not answer, as on a machine without the internet."""
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{free_port()}")  # nothing listens there


@pytest.mark.parametrize("folder", ["./glue-copy", "{tmp}/glue-copy", "copies/of/glue"])
def test_a_dataset_folder_that_does_not_exist_is_named_not_the_hub(tmp_path, monkeypatch, capsys, folder):
    unreachable_hub(tmp_path, monkeypatch)
    monkeypatch.chdir(tmp_path)
    folder = folder.format(tmp=tmp_path)
    assert prep("glue", "rte", "--dataset", folder, "--out", str(tmp_path / "data")) == 2
    error = capsys.readouterr().err
    absolute = tmp_path / folder.removeprefix("./")
    assert f"--dataset {folder}: no such folder ({absolute} does not exist)" in error
    assert "its README.md and the folder rte/ of its parquet files" in error
    assert "did not answer" not in error
    assert not (tmp_path / "data").exists()


def test_a_folder_that_could_be_a_hub_name_is_named_with_what_the_hub_said(tmp_path, monkeypatch, capsys):
    unreachable_hub(tmp_path, monkeypatch)
    monkeypatch.chdir(tmp_path)
    assert prep("glue", "rte", "--dataset", "data/glue", "--out", str(tmp_path / "data")) == 2
    error = capsys.readouterr().err
    assert "could not load 'data/glue': there is no folder data/glue here, and the Hugging Face hub" in error
    assert not (tmp_path / "data").exists()


def test_a_file_as_the_dataset_folder_is_named(tmp_path, monkeypatch, capsys):
    unreachable_hub(tmp_path, monkeypatch)
    given = SAMPLES / "wnli_train.jsonl"
    assert prep("glue", "wnli", "--dataset", str(given), "--out", str(tmp_path / "data")) == 2
    error = capsys.readouterr().err
    assert f"--dataset {given} is a file; give a dataset folder" in error and "did not answer" not in error


def test_a_split_that_cannot_be_written_leaves_none_of_the_files(tmp_path, monkeypatch):
    """A validation file larger than the file system takes (RLIMIT_FSIZE, as a full disk): exit 2
    naming it, and no train file left to be taken for a whole prep (a rerun refused it as existing)."""
    train = rows_of(SAMPLES / "wnli_train.jsonl")
    validation = rows_of(SAMPLES / "wnli_validation.jsonl") * 20
    copy = hub_dataset_copy(tmp_path / "glue", "wnli", {"train": train, "validation": validation})
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")

    def prep_glue(out: Path, limit: int | None = None) -> subprocess.CompletedProcess:
        def limited():
            if limit:  # the cache of datasets is written by the first run, this one only reads it
                resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
                signal.signal(signal.SIGXFSZ, signal.SIG_IGN)

        argv = [
            sys.executable,
            "-m",
            "zerolab",
            "prep",
            "glue",
            "wnli",
            "--dataset",
            str(copy),
            "--out",
            str(out),
        ]
        return subprocess.run(argv, capture_output=True, text=True, preexec_fn=limited, check=False)

    assert prep_glue(tmp_path / "first").returncode == 0
    assert (tmp_path / "first" / "wnli_train.jsonl").stat().st_size < 64_000
    assert (tmp_path / "first" / "wnli_validation.jsonl").stat().st_size > 64_000
    out = tmp_path / "data"
    result = prep_glue(out, limit=64_000)
    assert result.returncode == 2, result.stderr
    assert f"cannot write {out}/wnli_validation.jsonl (File too large)" in result.stderr
    assert "Traceback" not in result.stderr
    assert not out.exists()
