"""Bad records, reruns, and a killed run that resumes to the same bytes."""

import gzip
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import zstandard
from prep_helpers import FIXTURES, SAMPLE, manifest, owt_jsonl, prep, same_bytes

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


def test_the_same_input_named_another_way_is_already_prepared(tmp_path, monkeypatch, capsys):
    # `make demo` names the bundled sample by its absolute path, a user by a relative one or a link
    (tmp_path / "link").symlink_to(SAMPLE.parent)
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "dolly"
    assert prep("dolly", "--input", str(SAMPLE), "--out", str(out)) == 0
    bin_path = tmp_path / "dolly_text_document.bin"
    first = bin_path.stat().st_mtime_ns
    for spelling in ("link/dolly151.jsonl", f"./link/{SAMPLE.name}"):
        capsys.readouterr()
        assert prep("dolly", "--input", spelling, "--out", str(out)) == 0, capsys.readouterr().err
        assert bin_path.stat().st_mtime_ns == first


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


# Issue 40, tried as a new user would.

WIKITEXT = FIXTURES.parents[2] / "data_prep" / "samples" / "wikitext2_valid_head.tokens"


def compressed(folder: Path, source: Path, name: str) -> Path:
    """`source` (a real sample) compressed as `name` says (.gz or .zst), into `folder`."""
    data = source.read_bytes()
    if not name.endswith(".zst"):
        data = gzip.compress(data)
    elif not source.name.endswith(".zst"):
        data = zstandard.ZstdCompressor().compress(data)
    folder.mkdir(exist_ok=True)
    path = folder / name
    path.write_bytes(data)
    return path


def dolly_array(folder: Path) -> Path:
    """The dolly sample as a .json array of its records."""
    folder.mkdir(exist_ok=True)
    path = folder / "dolly.json"
    path.write_text(json.dumps([json.loads(line) for line in SAMPLE.read_text().splitlines()]))
    return path


def dolly_parquet(folder: Path) -> Path:
    """The dolly sample as a parquet file."""
    # pyarrow here, not at the top: heavy (0.4 s)
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder.mkdir(exist_ok=True)
    path = folder / "dolly.parquet"
    pq.write_table(pa.Table.from_pylist([json.loads(line) for line in SAMPLE.read_text().splitlines()]), path)
    return path


# every reader of prep's local files: (id, the input made in a folder from a real sample, the command)
READERS = [
    ("jsonl zstd", lambda d: compressed(d, FIXTURES / "owt1000.jsonl.zst", "owt.jsonl.zst"), ["jsonl"]),
    ("jsonl gzip", lambda d: compressed(d, FIXTURES / "dolly151_text.jsonl", "d.jsonl.gz"), ["jsonl"]),
    ("text per file", lambda d: compressed(d, WIKITEXT, "w.txt.gz"), ["text"]),
    ("text per line", lambda d: compressed(d, WIKITEXT, "w.txt.zst"), ["text", "--document", "line"]),
    ("dolly jsonl", lambda d: compressed(d, SAMPLE, "dolly.jsonl.zst"), ["dolly", "--input"]),
    ("dolly json array", lambda d: compressed(d, dolly_array(d), "dolly.json.gz"), ["dolly", "--input"]),
    ("dolly parquet", lambda d: compressed(d, dolly_parquet(d), "dolly.parquet.gz"), ["dolly", "--input"]),
    ("wikitext", lambda d: compressed(d, WIKITEXT, "wiki.valid.raw.gz"), ["wikitext", "--valid"]),
]
READER_IDS = [case[0] for case in READERS]
READER_CASES = [case[1:] for case in READERS]


@pytest.mark.parametrize(("make", "command"), READER_CASES, ids=READER_IDS)
@pytest.mark.parametrize("keep", [0.5, 0.0002], ids=["half", "its first bytes"])
def test_a_compressed_input_cut_short_is_named_as_such_and_nothing_written(
    tmp_path, capsys, make, command, keep
):
    # an interrupted download: no EOFError traceback, no "no documents", no malformed last record
    path = make(tmp_path / "in")
    data = path.read_bytes()
    path.write_bytes(data[: max(5, int(len(data) * keep))])
    assert prep(*command, str(path), "--out", str(tmp_path / "out" / "x")) == 2
    error = capsys.readouterr().err
    assert f"{path} is cut short" in error and "download or copy it again" in error
    assert "no documents" not in error and "malformed" not in error
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(("make", "command"), READER_CASES, ids=READER_IDS)
def test_a_whole_compressed_input_gives_the_bytes_of_the_plain_one(tmp_path, make, command):
    path = make(tmp_path / "in")
    data = path.read_bytes()
    plain = tmp_path / "plain" / path.name.rsplit(".", 1)[0]
    plain.parent.mkdir()
    if path.suffix == ".gz":
        plain.write_bytes(gzip.decompress(data))
    else:
        plain.write_bytes(zstandard.ZstdDecompressor().decompressobj().decompress(data))
    assert prep(*command, str(path), "--out", str(tmp_path / "a")) == 0
    assert prep(*command, str(plain), "--out", str(tmp_path / "b")) == 0
    made = sorted(tmp_path.glob("a_*.bin"))
    assert made and all(same_bytes(a, str(a).replace("/a_", "/b_")) for a in made)


@pytest.mark.parametrize("name", ["d.jsonl.gz", "d.jsonl.zst"])
def test_a_damaged_compressed_input_is_named_as_such(tmp_path, capsys, name):
    path = compressed(tmp_path / "in", FIXTURES / "dolly151_text.jsonl", name)
    data = bytearray(path.read_bytes())
    for at in range(len(data) // 3, len(data) // 2, 101):
        data[at] ^= 0x5A
    path.write_bytes(bytes(data))
    assert prep("jsonl", str(path), "--out", str(tmp_path / "out" / "x")) == 2
    error = capsys.readouterr().err
    assert f"{path} is damaged" in error and "download or copy it again" in error
    assert not (tmp_path / "out").exists()


def test_zstd_frames_one_after_another_are_all_read(tmp_path):
    # as pzstd, or `cat a.zst b.zst`, writes them: a frame's end is not the file's
    lines = (FIXTURES / "dolly151_text.jsonl").read_bytes().splitlines(keepends=True)
    path = tmp_path / "two.jsonl.zst"
    path.write_bytes(b"".join(zstandard.ZstdCompressor().compress(b"".join(lines[i::2])) for i in (0, 1)))
    assert prep("jsonl", str(path), "--out", str(tmp_path / "out")) == 0
    assert manifest(tmp_path / "out")["documents_written"] == 151


@pytest.mark.parametrize("under", ["notes.txt/x", "notes.txt/deeper/x", "notes.txt/"])
def test_an_out_under_a_file_is_refused_naming_the_file(tmp_path, capsys, under):
    (tmp_path / "notes.txt").write_text("mine\n")
    assert prep("jsonl", str(FIXTURES / "dolly151_text.jsonl"), "--out", f"{tmp_path}/{under}") == 2
    error = capsys.readouterr().err
    assert f"--out: {tmp_path}/notes.txt is a file, where a folder of the output goes" in error
    assert "choose another --out" in error
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


def test_the_work_folder_taken_by_a_file_is_refused_naming_it(tmp_path, capsys):
    (tmp_path / "out_text_document.partial").write_text("mine\n")
    assert prep("jsonl", str(FIXTURES / "dolly151_text.jsonl"), "--out", str(tmp_path / "out")) == 2
    error = capsys.readouterr().err
    assert f"--out: {tmp_path}/out_text_document.partial is a file, where the run keeps" in error
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out_text_document.partial"]


@pytest.mark.parametrize(
    ("command", "named"),
    [
        (["dolly", "--input", str(SAMPLE)], ["dolly_text_document"]),
        (["jsonl", str(FIXTURES / "dolly151_text.jsonl")], ["dolly151_text_text_document"]),
        (["jsonl", str(FIXTURES / "dolly151_text.jsonl"), "--split", "8,2"],
         ["dolly151_text_train_text_document", "dolly151_text_valid_text_document"]),
        (["text", str(WIKITEXT), str(WIKITEXT)], ["text_text_document"]),
        (["wikitext", "--valid", str(WIKITEXT)], ["wikitext_valid_text_document"]),
    ],
    ids=["dolly", "jsonl: the file's name", "split", "several files: the corpus", "wikitext"],
)  # fmt: skip
@pytest.mark.parametrize("folder", ["data/", "./", "data/sub/.."])
def test_an_out_folder_gets_the_files_inside_named_after_the_corpus(
    tmp_path, monkeypatch, capsys, command, named, folder
):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data" / "sub").mkdir(parents=True)
    assert prep(*command, "--out", folder) == 0
    made = sorted(str(path.relative_to(tmp_path)) for path in tmp_path.rglob("*") if path.is_file())
    expected = [
        os.path.normpath(f"{folder}/{name}.{ext}")
        for name in named
        for ext in ("bin", "idx", "manifest.json")
    ]
    assert made == sorted(expected)  # inside the folder; no hidden `._text_document.*` beside it
    out = capsys.readouterr().out
    assert f"wrote {Path(folder) / named[0]}.bin/.idx" in out
    if len(named) == 1:
        assert prep("inspect", folder) == 0
        assert "OK" in capsys.readouterr().out


def test_an_empty_out_is_refused(tmp_path, capsys):
    assert prep("jsonl", str(FIXTURES / "dolly151_text.jsonl"), "--out", "") == 2
    assert "--out '': give an output prefix" in capsys.readouterr().err


def test_a_split_run_refused_on_its_second_split_writes_none(tmp_path, capsys):
    # valid's output is there from another job (other options): refused before train is written
    source = FIXTURES / "dolly151_text.jsonl"
    assert prep("jsonl", str(source), "--out", str(tmp_path / "x_valid")) == 0
    theirs = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    assert prep("jsonl", str(source), "--out", str(tmp_path / "x"), "--split", "8,2") == 2
    error = capsys.readouterr().err
    assert "x_valid_text_document.bin exists, made from another input or with other options" in error
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == theirs


def test_ctrl_c_ends_quietly_saying_how_to_resume_and_the_same_command_resumes(tmp_path):
    corpus = owt_jsonl(tmp_path, copies=3)
    whole, resumed = tmp_path / "whole", tmp_path / "resumed"
    base = [sys.executable, "-m", "zerolab", "prep", "jsonl", str(corpus), "--workers", "2"]
    base += ["--shard-mb", "0.5"]
    subprocess.run([*base, "--out", str(whole), "--quiet"], check=True, capture_output=True)

    # Ctrl-C in a terminal: SIGINT to the whole foreground process group, the workers included
    run = subprocess.Popen(
        [*base, "--out", str(resumed)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
        # as a terminal's foreground job gets it, whatever this process inherited (a shell's
        # background job ignores SIGINT, and so would the run)
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip
    partial = tmp_path / "resumed_text_document.partial"
    deadline = time.monotonic() + 60
    while not (partial / "shard-000002.done.json").exists():
        assert run.poll() is None and time.monotonic() < deadline, "the run ended before Ctrl-C"
        time.sleep(0.005)
    os.killpg(run.pid, signal.SIGINT)
    _, err = run.communicate(timeout=60)
    assert run.returncode == 130
    assert "Traceback" not in err and "KeyboardInterrupt" not in err
    done = len(list(partial.glob("*.done.json")))
    assert err.strip().splitlines()[-1] == (
        "zerolab: interrupted; run the same command again to resume "
        f"({done} finished shards kept in {partial})"
    )
    assert not (tmp_path / "resumed_text_document.bin").exists()

    result = subprocess.run([*base, "--out", str(resumed)], check=True, capture_output=True, text=True)
    assert f"resuming after {done} finished shards" in result.stderr
    for ext in ("bin", "idx"):
        assert same_bytes(f"{whole}_text_document.{ext}", f"{resumed}_text_document.{ext}")


@pytest.mark.skipif(
    not Path("/proc/self").is_dir(), reason="needs Linux's /proc, where no folder can be made"
)
@pytest.mark.parametrize(
    "command",
    [["jsonl", str(FIXTURES / "dolly151_text.jsonl")], ["glue", "wnli", "--dataset", "nyu-mll/glue"]],
    ids=["jsonl", "glue"],
)
def test_an_out_folder_that_cannot_be_made_is_refused_naming_it(capsys, command):
    assert prep(*command, "--out", "/proc/zerolab-prep-test/out/x") == 2
    error = capsys.readouterr().err
    assert "--out: cannot make the folder /proc/zerolab-prep-test" in error and "choose an --out" in error


def test_a_manifest_that_is_not_one_is_named_by_prep_and_inspect(tmp_path, capsys):
    args = ["jsonl", str(FIXTURES / "dolly151_text.jsonl"), "--out", str(tmp_path / "d")]
    assert prep(*args) == 0
    manifest_path = tmp_path / "d_text_document.manifest.json"
    manifest_path.write_text(manifest_path.read_text()[:100])  # cut short
    capsys.readouterr()
    assert prep(*args) == 2
    assert f"{manifest_path} is not a manifest of `zerolab prep`; pass --force" in capsys.readouterr().err
    assert prep("inspect", str(tmp_path / "d")) == 1
    assert f"{manifest_path} is not a manifest of `zerolab prep`" in capsys.readouterr().out
    assert prep(*args, "--force") == 0 and prep("inspect", str(tmp_path / "d")) == 0
