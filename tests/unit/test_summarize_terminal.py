"""The table `zerolab summarize` prints fits the terminal: at any width it keeps the columns that
fit, most important first, and names the ones it left out (all of them are in summary.md)."""

from __future__ import annotations

from pathlib import Path

import pytest
from rich.cells import cell_len
from summarize_helpers import make_run_dir, make_sweep

from zerolab.cli import main
from zerolab.summarize.columns import TABLE
from zerolab.summarize.tables import FINE_TUNING_TITLE

RUNS = ("final_z0", "final_z1", "final_z2", "final_z3", "final_z3off", "fp16_z2")


def _printed(tmp_path: Path, capsys, monkeypatch, width: int) -> list[str]:
    for name in RUNS:
        make_run_dir(tmp_path / "logs", name, name)
    monkeypatch.setenv("COLUMNS", str(width))
    assert main(["summarize", str(tmp_path / "logs"), "--out", str(tmp_path / "out"), "--no-plots"]) == 0
    lines = capsys.readouterr().out.splitlines()
    return [line for line in lines if not line.startswith(("wrote ", "no plot "))]


@pytest.mark.parametrize("width", [60, 80, 120, 200])
def test_every_line_of_the_table_fits_the_terminal(width: int, tmp_path: Path, capsys, monkeypatch):
    lines = _printed(tmp_path, capsys, monkeypatch, width)
    assert max(cell_len(line) for line in lines) <= width
    table = "\n".join(lines)
    assert all(name in table for name in RUNS)
    assert "failed" in table  # the status is never the column left out


def test_at_80_columns_the_table_names_what_it_left_out(tmp_path: Path, capsys, monkeypatch):
    text = " ".join(" ".join(_printed(tmp_path, capsys, monkeypatch, 80)).split())
    assert "left out at this width:" in text and "(every column is in summary.md)" in text
    left_out = text.split("left out at this width:")[1].split("(every column")[0]
    for kept in ("run", "status", "tokens/s per GPU"):
        assert kept not in left_out.replace("per GPU median", "")
    assert "micro/global batch" in left_out and "precision" in left_out
    header = text.split("left out")[0]
    assert "1,096" in header and "0.59" in header  # dp's throughput and memory


def test_at_240_columns_every_column_is_shown(tmp_path: Path, capsys, monkeypatch):
    text = " ".join(" ".join(_printed(tmp_path, capsys, monkeypatch, 240)).split())
    assert "left out" not in text
    for column in TABLE:
        if column.terminal:
            assert column.table_header.split()[0] in text, column.key


GRID = [  # a sweep of two keys, its names long, one cell failed: what pushed every number out
    ({"zero": "z0", "train.micro_batch_size": 1}, "final_z0", "completed"),
    ({"zero": "z0", "train.micro_batch_size": 2}, "bf16_z0", "completed"),
    ({"zero": "z1", "train.micro_batch_size": 1}, "final_z1", "completed"),
    ({"zero": "z1", "train.micro_batch_size": 2}, "fp16_z2", "failed"),
]


@pytest.mark.parametrize("columns", ["80", None])  # None: output redirected, rich's 80 columns
def test_at_80_columns_the_numbers_stay(columns, tmp_path: Path, capsys, monkeypatch):
    directory = make_sweep(tmp_path, "grid", GRID)
    if columns:
        monkeypatch.setenv("COLUMNS", columns)
    else:
        monkeypatch.delenv("COLUMNS", raising=False)
    assert main(["summarize", str(directory), "--no-plots"]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if not line.startswith("wrote ")]
    assert max(cell_len(line) for line in lines) <= 80
    text = " ".join(" ".join(lines).split())
    assert "zerolab summary (1 of 2)" in text and "zerolab summary (2 of 2)" in text
    tables = text.split("left out at this width")[0]
    for number in ("1,096", "[939.8-1,142]", "0.59", "1.54", "10.816 → 10.696", "467"):
        assert number in tables  # throughput, memory, host memory, loss, time per iteration of z0
    assert "failed: exception:" in tables and "ValueError:" in tables  # the failed cell's cause
    assert "median [p10-p90]" in tables  # the header whole (rich markup took `[p10-p90]`)
    left_out = text.split("left out at this width:")[1].split("(every column")[0]
    for shown in ("tokens/s", "max allocated", "peak host", "loss", "ms/iteration", "status"):
        assert shown not in left_out
    assert "precision" in left_out


def test_brackets_in_names_and_labels_are_shown_as_they_are(tmp_path: Path, capsys, monkeypatch):
    # rich read `[bf16]`, `[p10-p90]` and `[higher is better]` as its markup, and left them out
    bracketed = make_run_dir(tmp_path / "logs", "gpt2[bf16]", "final_z0", state="completed")
    other = make_run_dir(tmp_path / "logs", "gpt2", "final_z1", state="completed")
    monkeypatch.setenv("COLUMNS", "250")
    assert main(["summarize", str(tmp_path / "logs"), "--no-plots"]) == 0
    printed = " ".join(capsys.readouterr().out.split())
    assert "│ gpt2[bf16] │" in printed and "[p10-p90]" in printed
    assert main(["compare", str(bracketed), str(other)]) == 0
    printed = " ".join(capsys.readouterr().out.split())
    assert "gpt2[bf16] (baseline)" in printed and "tokens/s per GPU [higher is better]" in printed


def test_the_fine_tuning_table_prints_through_the_terminal_renderer(tmp_path: Path, capsys, monkeypatch):
    # rich 15 took a header that is not a str for a Column: print_report crashed at this table
    make_run_dir(tmp_path / "logs", "mrpc_z0", "final_z0", run={"task": "mrpc", "setup": "z0"})
    monkeypatch.setenv("COLUMNS", "120")
    assert main(["summarize", str(tmp_path / "logs"), "--out", str(tmp_path / "out"), "--no-plots"]) == 0
    out = capsys.readouterr().out
    table = out[out.index(FINE_TUNING_TITLE) :].splitlines()
    assert [cell.strip() for cell in table[2].split("┃")[1:-1]] == ["model", "task", "z0"], table
    assert [cell.strip() for cell in table[4].split("│")[2:3]] == ["mrpc"], table
