"""Bad records, reruns, and a killed run that resumes to the same bytes."""

import json
import signal
import subprocess
import sys
import time

import pytest
from prep_helpers import FIXTURES, manifest, owt_jsonl, prep, same_bytes

GOOD = json.dumps({"text": "Hello world."})
BAD_LINES = {
    "malformed JSON": (b'{"text": "unterminated', "malformed JSON"),
    "missing key": (json.dumps({"body": "no text key"}).encode(), "no key 'text'"),
    "not UTF-8": (b'{"text": "caf\xe9"}', "not UTF-8"),
    "empty document": (json.dumps({"text": ""}).encode(), "empty document"),
    "not a string": (json.dumps({"text": 42}).encode(), "not a string"),
    "invalid Unicode": (b'{"text": "lone \\ud800 surrogate"}', "lone surrogate"),
}


def corpus_with(tmp_path, bad: bytes):
    path = tmp_path / "corpus.jsonl"
    path.write_bytes(b"\n".join([GOOD.encode(), GOOD.encode(), bad, GOOD.encode()]) + b"\n")
    return path


@pytest.mark.parametrize("reason", sorted(BAD_LINES))
def test_bad_record_stops_with_file_and_line_and_writes_nothing(tmp_path, capsys, reason):
    bad, message = BAD_LINES[reason]
    path = corpus_with(tmp_path, bad)
    out = tmp_path / "out"
    assert prep("jsonl", str(path), "--out", str(out)) == 2
    error = capsys.readouterr().err
    assert f"{path}:3:" in error and message in error and "--on-error skip" in error
    assert not list(tmp_path.glob("out_text_document.bin*")) and not list(tmp_path.glob("*.idx*"))


def test_skip_counts_bad_records_in_the_manifest(tmp_path):
    path = tmp_path / "corpus.jsonl"
    lines = [GOOD.encode()] + [bad for bad, _ in BAD_LINES.values()] + [b"", GOOD.encode()]
    path.write_bytes(b"\n".join(lines) + b"\n")
    out = tmp_path / "out"
    assert prep("jsonl", str(path), "--out", str(out), "--on-error", "skip") == 0
    facts = manifest(out)
    assert facts["records_read"] == 2 + len(BAD_LINES)  # the blank line is not a record
    assert facts["documents_written"] == 2
    assert facts["skipped_records"]["count"] == len(BAD_LINES)
    assert facts["skipped_records"]["by_reason"] == dict.fromkeys(BAD_LINES, 1)
    assert facts["skipped_records"]["first_examples"][0]["where"] == f"{path}:2"


def test_rerun_is_a_no_op_unless_forced_and_other_options_are_refused(tmp_path, capsys):
    out = tmp_path / "dolly"
    args = ["jsonl", str(FIXTURES / "dolly151_text.jsonl"), "--out", str(out)]
    assert prep(*args) == 0
    bin_path = tmp_path / "dolly_text_document.bin"
    first = bin_path.stat().st_mtime_ns
    assert prep(*args) == 0
    assert bin_path.stat().st_mtime_ns == first
    assert prep(*args, "--force") == 0
    assert bin_path.stat().st_mtime_ns != first
    capsys.readouterr()
    assert prep(*args, "--key", "instruction") == 2
    assert "--force" in capsys.readouterr().err


def test_missing_input_and_bad_options_exit_2(tmp_path, capsys):
    assert prep("jsonl", str(tmp_path / "nope.jsonl"), "--out", str(tmp_path / "o")) == 2
    assert "nope.jsonl does not exist" in capsys.readouterr().err
    assert (
        prep("jsonl", str(FIXTURES / "dolly151_text.jsonl"), "--out", str(tmp_path / "o"), "--split", "a,b")
        == 2
    )


def test_a_directory_as_input_is_called_a_directory(tmp_path, capsys):
    folder = tmp_path / "corpus"
    folder.mkdir()
    (folder / "part-0.jsonl").write_text(GOOD + "\n")
    assert prep("jsonl", str(folder), "--out", str(tmp_path / "o")) == 2
    assert (
        f"input {folder} is a directory (it holds part-0.jsonl): give the files in it"
        in capsys.readouterr().err
    )


def test_an_output_path_taken_by_a_directory_is_refused_and_nothing_is_left(tmp_path, capsys):
    (tmp_path / "out_text_document.bin").mkdir()
    assert prep("jsonl", str(FIXTURES / "dolly151_text.jsonl"), "--out", str(tmp_path / "out")) == 2
    assert "out_text_document.bin is a directory, where the output file goes" in capsys.readouterr().err
    assert sorted(path.name for path in tmp_path.iterdir()) == ["out_text_document.bin"]


def test_a_refused_prep_leaves_no_folder_it_made(tmp_path, capsys):
    path = corpus_with(tmp_path, BAD_LINES["malformed JSON"][0])
    assert prep("jsonl", str(path), "--out", str(tmp_path / "new" / "deeper" / "out")) == 2
    assert "malformed JSON" in capsys.readouterr().err
    assert not (tmp_path / "new").exists()


def test_killed_run_resumes_to_identical_bytes(tmp_path):
    corpus = owt_jsonl(tmp_path, copies=3)
    whole, resumed = tmp_path / "whole", tmp_path / "resumed"
    base = [
        sys.executable,
        "-m",
        "zerolab",
        "prep",
        "jsonl",
        str(corpus),
        "--workers",
        "1",
        "--shard-mb",
        "0.5",
    ]
    subprocess.run([*base, "--out", str(whole), "--quiet"], check=True, capture_output=True)

    run = subprocess.Popen(
        [*base, "--out", str(resumed)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    partial = tmp_path / "resumed_text_document.partial"
    deadline = time.monotonic() + 60
    while not (partial / "shard-000003.done.json").exists():
        assert run.poll() is None and time.monotonic() < deadline, "the run ended before it could be killed"
        time.sleep(0.005)
    run.send_signal(signal.SIGKILL)
    run.wait()
    assert not (tmp_path / "resumed_text_document.bin").exists()
    done_before = len(list(partial.glob("*.done.json")))
    assert 4 <= done_before < 29

    result = subprocess.run([*base, "--out", str(resumed)], check=True, capture_output=True, text=True)
    assert f"resuming after {done_before} finished shards" in result.stderr
    assert not partial.exists()
    for ext in ("bin", "idx"):
        assert same_bytes(f"{whole}_text_document.{ext}", f"{resumed}_text_document.{ext}")
    assert manifest(resumed)["records_read"] == 3000
    assert manifest(resumed)["files"]["bin"]["sha256"] == manifest(whole)["files"]["bin"]["sha256"]


def test_peak_memory_stays_bounded(tmp_path):
    corpus = owt_jsonl(tmp_path, copies=6)  # 29 MB of text, 6.3 M tokens
    probe = (
        "import resource, subprocess, sys;"
        "subprocess.run(sys.argv[1:], check=True, capture_output=True);"
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)"
    )
    command = [sys.executable, "-m", "zerolab", "prep", "jsonl", str(corpus), "--out", str(tmp_path / "o")]
    peak_kib = int(
        subprocess.run([sys.executable, "-c", probe, *command], capture_output=True, text=True).stdout
    )
    assert peak_kib < 300 * 1024


@pytest.mark.parametrize(
    ("line", "message"),
    [
        (b'{"text": "unterminated', "malformed JSON (Unterminated string starting at column 10)"),
        (b'{"text": "a\x01"}', "malformed JSON (Invalid control character at column 12)"),
        (b'{"text": 1,}', "malformed JSON (Expecting property name enclosed in double quotes at column 12)"),
    ],
)
def test_a_json_error_reads_as_a_sentence(tmp_path, capsys, line, message):
    path = corpus_with(tmp_path, line)
    assert prep("jsonl", str(path), "--out", str(tmp_path / "out")) == 2
    error = capsys.readouterr().err
    assert f"{path}:3: {message}" in error
    assert " at at " not in error


def test_a_malformed_json_array_names_its_line_and_column(tmp_path, capsys):
    path = tmp_path / "dolly.json"
    path.write_text('[\n  {"instruction": "a", "context": "", "response": "b"},\n  {"instruction": "c"\n]\n')
    assert prep("dolly", "--input", str(path), "--out", str(tmp_path / "out")) == 2
    error = capsys.readouterr().err
    assert f"{path}: not a JSON array of records (Expecting ',' delimiter at line 4, column 1)" in error


def nothing_written(tmp_path) -> bool:
    return not [path.name for path in tmp_path.iterdir() if path.name.startswith("out")]


@pytest.mark.parametrize(
    ("content", "options", "expected"),
    [
        (b"", [], "0 records read"),
        (b"\n\n  \n", [], "0 records read"),
        (
            b'{"body": "x"}\n{"body": "y"}\n',
            ["--on-error", "skip"],
            "2 records read, all skipped (missing key: 2)",
        ),
    ],
    ids=["an empty file", "blank lines only", "every record skipped"],
)
def test_an_input_without_documents_is_refused_and_nothing_written(
    tmp_path, capsys, content, options, expected
):
    path = tmp_path / "corpus.jsonl"
    path.write_bytes(content)
    assert prep("jsonl", str(path), "--out", str(tmp_path / "out"), *options) == 2
    error = capsys.readouterr().err
    assert f"{path}: no documents to write ({expected})" in error
    assert "an empty dataset cannot train" in error
    assert nothing_written(tmp_path)


def test_an_empty_text_file_is_refused(tmp_path, capsys):
    path = tmp_path / "empty.txt"
    path.write_text("")
    assert prep("text", str(path), "--out", str(tmp_path / "out"), "--document", "line") == 2
    assert f"{path}: no documents to write" in capsys.readouterr().err
    assert nothing_written(tmp_path)


def test_a_split_that_would_be_empty_is_refused_naming_each_count(tmp_path, capsys):
    path = tmp_path / "five.jsonl"
    path.write_text("".join(json.dumps({"text": f"document {n}"}) + "\n" for n in range(5)))
    assert prep("jsonl", str(path), "--out", str(tmp_path / "out"), "--split", "98,2") == 2
    error = capsys.readouterr().err
    assert "--split 98,2: the valid split would get 0 of the 5 documents (train 5, valid 0)" in error
    assert nothing_written(tmp_path)
    assert prep("jsonl", str(path), "--out", str(tmp_path / "ok"), "--split", "4,1") == 0
    assert (tmp_path / "ok_valid_text_document.bin").is_file()
