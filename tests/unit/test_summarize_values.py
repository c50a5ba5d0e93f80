"""A value the summary cannot take is skipped with a warning naming the file and line (or key),
and the run is summarized from the rest: malformed or impossible numbers in a log line (`nan`,
`inf`, `1.2.3`, negative throughput or memory, a truncated line), and run.json values of the wrong
type or range. Never a traceback."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from summarize_helpers import CPU, REAL, make_run_dir

from zerolab.cli import main
from zerolab.logs.lines import clean_line
from zerolab.logs.parse import LogParser, parse_log
from zerolab.summarize import tables
from zerolab.summarize.collect import Collection
from zerolab.summarize.discover import Run
from zerolab.summarize.summary import Options, summarize_run

FINAL_Z1 = (CPU / "final_z1.log").read_text().splitlines()
MEASUREMENTS = (
    "tokens_per_s_per_gpu",
    "tokens_per_s_per_gpu_p10",
    "ms_per_iter",
    "ms_per_iter_p10",
    "samples_per_s",
    "tflops_per_gpu",
    "tflops_per_gpu_p10",
    "epoch_time_s",
    "max_allocated_GiB",
    "peak_host_GiB",
)


def _line(pattern: str) -> int:
    """The 1-based number of the last line of final_z1.log matching `pattern`."""
    return max(n for n, text in enumerate(FINAL_Z1, 1) if re.search(pattern, text))


ITERATION_20, MEMORY, TIMER_20 = _line(r"iteration +20/"), _line(r"memory \(MB\)"), _line("global_step=20")
# (line, the segment holding the value, how the segment reads with the value `{}`)
SEGMENTS = {
    "iteration time": (
        ITERATION_20,
        r" elapsed time per iteration \(ms\): [^|]*\|",
        " elapsed time per iteration (ms): {} |",
    ),
    "tgs": (
        ITERATION_20,
        r" tokens per gpu per second \(tgs\): [^|]*\|",
        " tokens per gpu per second (tgs): {} |",
    ),
    "global batch": (ITERATION_20, r" global batch size: [^|]*\|", " global batch size: {} |"),
    "max allocated": (MEMORY, r" \| max allocated: [\d.]+", " | max allocated: {}"),
    "DeepSpeed max allocated": (TIMER_20, r", MaxMemAllocated=[\d.]+GB", ", MaxMemAllocated={}GB"),
    "DeepSpeed samples/s": (TIMER_20, r", CurrSamplesPerSec=[\d.]+", ", CurrSamplesPerSec={}"),
    "see_memory_usage": (_line("Max_MA"), r"Max_MA [\d.]+ GB", "Max_MA {} GB"),
    "CPU memory": (_line("CPU Virtual Memory"), r"used = [\d.]+ GB, ", "used = {} GB, "),
}
BAD_VALUES = ("nan", "inf", "-inf", "-5", "-0.5", "1.2.3", "1e999", "abc")


def _log_with(path: Path, segment: str, value: str | None) -> int:
    """final_z1.log written to `path` with the segment's value replaced by `value` (None: the whole
    segment left out); returns the line number changed."""
    number, pattern, form = SEGMENTS[segment]
    lines = list(FINAL_Z1)
    replaced = re.sub(pattern, "" if value is None else form.format(value), lines[number - 1])
    assert replaced != lines[number - 1], segment
    lines[number - 1] = replaced
    path.write_text("\n".join(lines) + "\n")
    return number


def _summarize(capsys, path: Path, out: Path) -> tuple[dict, str]:
    assert main(["summarize", str(path), "--out", str(out), "--no-plots", "--format", "json"]) == 0
    captured = capsys.readouterr()
    return json.loads(captured.out)["runs"][0], captured.err


@pytest.mark.parametrize("value", BAD_VALUES)
@pytest.mark.parametrize("segment", SEGMENTS)
def test_a_bad_number_in_a_log_line_is_skipped_with_a_warning_naming_file_and_line(
    segment, value, tmp_path: Path, capsys
):
    bad, without = tmp_path / "final_z1.log", tmp_path / "without" / "final_z1.log"
    without.parent.mkdir()
    number = _log_with(bad, segment, value)
    _log_with(without, segment, None)
    row, err = _summarize(capsys, bad, tmp_path / "out")
    expected, _ = _summarize(capsys, without, tmp_path / "out-without")
    assert f"warning: {bad}:{number}:" in err, err
    assert any(note.startswith(f"final_z1.log:{number}:") for note in row["notes"]), row["notes"]
    # the run is summarized as if the value had not been printed at all
    for key in (k for k in row if k not in ("path", "notes")):
        assert row[key] == expected[key], key


def test_the_warning_names_the_key_and_the_value():
    parser = LogParser(Path("train.log"))
    line = FINAL_Z1[ITERATION_20 - 1].replace("(tgs): 1476.722", "(tgs): -1476.722")
    for number, text in enumerate([*FINAL_Z1[: ITERATION_20 - 1], line], 1):
        parser.feed(clean_line(number, text))
    log = parser.finish()
    problem = "`tokens per gpu per second (tgs)`: '-1476.722' is not a number >= 0 (value skipped)"
    assert log.bad_values == [(ITERATION_20, problem)]


def test_real_logs_have_no_bad_values():
    """Guards the other way: nothing the real logs print is taken for a malformed value."""

    for path in sorted((CPU.parent).glob("*/*.log")):
        assert parse_log(path).bad_values == [], path.name


ANSI_LOG = (REAL / "megatronds_v115-zero3-timeout-ansi.log").read_text().splitlines()
VALIDATION_LOG = (REAL / "megatronds_gpt3-175b-tgs-validation.log").read_text().splitlines()
TEMPLATE_LINES = [
    FINAL_Z1[SEGMENTS["tgs"][0] - 1],
    FINAL_Z1[SEGMENTS["max allocated"][0] - 1],
    FINAL_Z1[SEGMENTS["DeepSpeed samples/s"][0] - 1],
    FINAL_Z1[SEGMENTS["see_memory_usage"][0] - 1],
    FINAL_Z1[SEGMENTS["CPU memory"][0] - 1],
    next(line for line in ANSI_LOG if "Effective Tera Flops" in line),
    next(line for line in ANSI_LOG if " iteration " in line),
    next(line for line in VALIDATION_LOG if "loss at" in line),
]
NUMBER = re.compile(r"\d[\d.eE+-]*")
NUMERIC_TEXT = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.integers(-(10**30), 10**30).map(str),
    st.text(alphabet="0123456789.eE+-naifNI", max_size=12),
    st.text(max_size=8),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    template=st.sampled_from(TEMPLATE_LINES),
    values=st.lists(NUMERIC_TEXT, min_size=12, max_size=12),
    cut=st.one_of(st.none(), st.integers(0, 400)),
)
# found by the search: an iteration number beyond 64 bits leaves its whole line out
@example(template=TEMPLATE_LINES[0], values=["0", str(10**18), *["0.0"] * 10], cut=None)
def test_arbitrary_text_in_the_numeric_fields_never_raises(template: str, values: list[str], cut: int | None):
    """The parser takes real lines with any text where they print numbers, last line cut anywhere."""
    fields = iter(values * 4)
    line = NUMBER.sub(lambda _: next(fields), template)
    lines = [*FINAL_Z1[:400], line, line[:cut] if cut is not None else line]
    parser = LogParser(Path("train.log"))
    for number, text in enumerate(lines, 1):
        parser.feed(clean_line(number, text))
    log = parser.finish()
    summary = summarize_run(Run(Path("train.log")), log, None, Options())
    json.loads(tables.json_text(Collection(runs=[summary])))  # no NaN, no infinity
    for key in MEASUREMENTS:
        value = summary.row[key]
        assert value is None or (math.isfinite(value) and value >= 0), (key, value)
    for number, problem in log.bad_values:
        assert number > 400 and problem.endswith(("(value skipped)", "(left out)")), (number, problem)


RUN_JSON_CASES = {
    "a list": ("[1, 2]", "run.json: not a JSON object"),
    "a string": ('"final_z1"', "run.json: not a JSON object"),
    "null": ("null", "run.json: not a JSON object"),
    "truncated": ('{"name": "x", "world_size": 2', "run.json: not readable JSON"),
    "a string for a number": ('{"name": "x", "world_size": "2"}', "run.json: `world_size`"),
    "a bool for a number": ('{"name": "x", "world_size": true}', "run.json: `world_size`"),
    "a fraction": ('{"name": "x", "world_size": 2.5}', "run.json: `world_size`"),
    "negative": ('{"name": "x", "world_size": -2}', "run.json: `world_size`"),
    "huge": ('{"name": "x", "zero_stage": 1' + "0" * 400 + "}", "run.json: `zero_stage`"),
    "a ZeRO stage past 3": ('{"name": "x", "zero_stage": 7}', "run.json: `zero_stage`"),
    "NaN": ('{"name": "x", "seq_length": NaN}', "run.json: `seq_length`"),
    "a number for a name": ('{"name": 5}', "run.json: `name`"),
    "a string for a bool": ('{"name": "x", "offload_optimizer": "yes"}', "run.json: `offload_optimizer`"),
}


@pytest.mark.parametrize("case", RUN_JSON_CASES)
def test_unexpected_run_json_values_are_left_out_with_a_warning_naming_the_key(case, tmp_path: Path, capsys):
    body, problem = RUN_JSON_CASES[case]
    directory = make_run_dir(tmp_path, "run", "final_z1")
    (directory / "run.json").write_text(body)
    row, err = _summarize(capsys, directory, tmp_path / "out")
    assert f"warning: {directory / problem}" in err, err
    assert any(note.startswith(problem) for note in row["notes"]), row["notes"]
    # the rest comes from the log: the same numbers as the plain log gives
    plain, _ = _summarize(capsys, CPU / "final_z1.log", tmp_path / "plain")
    for key in ("world_size", "zero_stage", "seq_length", "tokens_per_s_per_gpu", "max_allocated_GiB"):
        assert row[key] == plain[key], key


def test_missing_run_json_keys_are_unknown_without_a_warning(tmp_path: Path, capsys):
    directory = make_run_dir(tmp_path, "run", "final_z1")
    (directory / "run.json").write_text("{}")
    row, err = _summarize(capsys, directory, tmp_path / "out")
    assert "warning" not in err
    assert row["name"] == directory.name and row["world_size"] == 2


def test_negative_or_malformed_host_memory_samples_are_skipped_with_a_warning(tmp_path: Path, capsys):
    directory = make_run_dir(tmp_path, "run", "final_z1")
    (directory / "samples.csv").write_text(
        "elapsed_s,process_tree_rss_MiB,system_used_MiB\n"
        "0,512.0,9000\n1,-4096.0,9100\n2,,9200\n3,1.2.3,9300\n4,1024,9400\n5,inf,9500\n"
    )
    row, err = _summarize(capsys, directory, tmp_path / "out")
    assert row["peak_host_GiB"] == 1.0 and row["peak_host_source"] == "samples.csv (process tree RSS)"
    for line, value in ((3, "-4096.0"), (5, "1.2.3"), (7, "inf")):
        problem = (
            f"samples.csv:{line}: `process_tree_rss_MiB`: {value!r} is not a number >= 0 (value skipped)"
        )
        assert f"warning: {directory}/{problem}" in err, err
        assert problem in row["notes"]
    assert "samples.csv:4" not in err  # an empty cell is a sample without the value, not a malformed one
