"""Cleaning physical lines: rank prefixes, ANSI codes, carriage returns, blockquotes,
interleaved ranks, wrapped and over-long lines."""

from __future__ import annotations

from pathlib import Path

from zerolab.logs.lines import MAX_LINE_BYTES, clean_line, read_lines
from zerolab.logs.parse import parse_log

ITERATION = (
    " iteration        5/      20 | consumed samples:           40 | elapsed time per iteration (ms): 386.5 |"
    " learning rate: 8.682E-05 | global batch size:     8 | lm loss: 1.081617E+01 | loss scale: 1.0 |"
    " number of skipped iterations:   0 | number of nan iterations:   0 |"
    " tokens per gpu per second (tgs): 1324.869 | TFLOPs: 0.03 |"
)


def _cleaned(text: str) -> tuple[str | None, str]:
    line = clean_line(1, text)
    return line.source, line.text


def test_launcher_prefixes_are_taken_off_and_kept_as_the_source():
    assert _cleaned("[default7]: iteration 1/2 |") == ("default7", " iteration 1/2 |")
    assert _cleaned("[rank2]:[E ProcessGroupNCCL.cpp:754] x") == ("rank2", "[E ProcessGroupNCCL.cpp:754] x")
    assert _cleaned("3:  iteration 1/2 |") == ("3", " iteration 1/2 |")
    assert _cleaned("actor-multi-node-worker-0: ppl: 2.1") == ("actor-multi-node-worker-0", "ppl: 2.1")
    assert _cleaned("node2:  iteration 1/2 |") == ("node2", " iteration 1/2 |")  # pdsh
    assert _cleaned("> 3:  iteration 1/2 |") == ("3", " iteration 1/2 |")


def test_error_lines_are_not_mistaken_for_prefixes():
    for text in (
        "AssertionError: Rank 3: found NaN",
        "srun: error: nid008576: task 2: Out Of Memory",
        "WARNING: could not find the metadata file",
        "Error: 3 ranks",
    ):
        assert clean_line(1, text).source is None
        assert clean_line(1, text).text == text


def test_ansi_codes_and_caret_escapes_are_removed():
    assert clean_line(1, "\x1b[H\x1b[2J\x1b[3J iteration").text == " iteration"
    assert clean_line(1, "ninja .. \x1b[92m[OKAY]\x1b[0m").text == "ninja .. [OKAY]"
    assert clean_line(1, "^[c iteration").text == " iteration"


def test_carriage_returns_split_a_physical_line(tmp_path: Path):
    path = tmp_path / "cr.log"
    path.write_bytes(b" 10%|##  | 1/10\r 20%|### | 2/10" + ITERATION.encode() + b"\r\n")
    lines = list(read_lines(path))
    assert [line.text[:8] for line in lines] == [" 10%|## ", " 20%|###"]
    assert parse_log(path).iteration_count == 1  # the iteration glued behind a progress bar is found


def test_over_long_line_is_cut_and_the_next_line_still_read(tmp_path: Path):
    path = tmp_path / "long.log"
    path.write_bytes(b"x" * (3 * MAX_LINE_BYTES + 17) + b"\n" + ITERATION.encode() + b"\n")
    lines = list(read_lines(path))
    assert len(lines) == 2 and lines[0].cut and len(lines[0].text) == MAX_LINE_BYTES
    assert parse_log(path).iterations["tokens_per_s_per_gpu"][0] == 1324.869


def test_interleaved_ranks_metrics_come_from_the_first_rank_printing_them(tmp_path: Path):
    other = ITERATION.replace("1324.869", "9999.0")
    path = tmp_path / "ranks.log"
    path.write_text(
        f"[default1]:{ITERATION}\n[default0]:{other}\n[default1]:{ITERATION.replace(' 5/', ' 10/')}\n"
    )
    log = parse_log(path)
    assert log.reporter == "default1"
    assert list(log.iterations["iteration"]) == [5.0, 10.0]
    assert 9999.0 not in log.iterations["tokens_per_s_per_gpu"]
    assert log.duplicate_iteration_lines == 1


def test_duplicated_lines_of_unprefixed_ranks_count_once(tmp_path: Path):
    path = tmp_path / "dup.log"
    path.write_text(f"{ITERATION}\n{ITERATION}\n")
    assert parse_log(path).iteration_count == 1


def test_a_line_wrapped_inside_a_number_is_joined(tmp_path: Path):
    head, tail = ITERATION.split("1.081617E+01")
    path = tmp_path / "wrapped.log"
    path.write_text(
        f"3: {head}1.0816\n17E+01{tail}\n3: [Rank 3] (after 5 iterations) memory (MB) | allocated: 1.0\n"
    )
    log = parse_log(path)
    assert log.iterations["loss"][0] == 10.81617
    assert log.iterations["tokens_per_s_per_gpu"][0] == 1324.869


def test_an_iteration_line_the_file_ends_inside_is_left_out(tmp_path: Path):
    path = tmp_path / "cut.log"
    path.write_text(
        f"{ITERATION}\n" + ITERATION.replace("      5/", "     10/").removesuffix(".869 | TFLOPs: 0.03 |")
    )
    log = parse_log(path)
    assert log.iteration_count == 1 and log.iterations["iteration"][0] == 5  # not a 10 of cut values
    assert log.ends_mid_line == 2
    path.write_text(f"{ITERATION}\n")  # a whole last line
    assert parse_log(path).ends_mid_line is None
