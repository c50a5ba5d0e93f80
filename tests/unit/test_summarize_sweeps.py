"""Sweeps in a summary: a sweep over `zero` shows its setups once (its `zero` column, not that
column and an identical `setup` beside it), and the cells of several sweeps summarized together
are told apart by their sweep's name, in the tables, summary.json, `compare` and the plots."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from summarize_helpers import make_sweep

from zerolab.cli import main
from zerolab.summarize import plots

SETUPS = {"z0": "z0", "z1": "z1", "z2": "z2", "z3": "z3", "z3_offload": "z3off"}
"""The demo's ZeRO setups and the cpu-engine log of each."""


def _demo(root: Path, name: str = "demo", prefix: str = "final", setups: tuple[str, ...] = ()) -> Path:
    """A sweep over `zero` as `make demo` runs it, its cells' logs the real CPU-engine ones."""
    chosen = setups or tuple(SETUPS)
    return make_sweep(root, name, [({"zero": z}, f"{prefix}_{SETUPS[z]}", "completed") for z in chosen])


@pytest.fixture
def figures(monkeypatch) -> dict[str, Any]:
    """The figures the summary saves, by file name."""
    saved: dict[str, Any] = {}
    monkeypatch.setattr(plots, "save_png", lambda figure, path, **_: saved.setdefault(path.name, figure))
    return saved


def test_a_sweep_over_zero_shows_its_setups_once(tmp_path: Path, capsys, monkeypatch):
    directory = _demo(tmp_path)
    monkeypatch.setenv("COLUMNS", "250")
    assert main(["summarize", str(directory), "--no-plots"]) == 0
    printed = capsys.readouterr().out
    header = (directory / "summary.md").read_text().splitlines()[0].split(" | ")
    assert header[:4] == ["| run", "zero", "engine", "model"] and "setup" not in header
    assert "z3_offload" in (directory / "summary.md").read_text()
    table_header = next(line for line in printed.splitlines() if "┃ run" in line)
    assert "zero" in table_header and "setup" not in table_header
    csv_header = (directory / "summary.csv").read_text().splitlines()[0].split(",")
    assert "setup" in csv_header and "sweep.zero" in csv_header  # the data keeps both


def test_setup_stays_beside_a_swept_key_that_says_something_else(tmp_path: Path):
    # a cell refused before it ran has no setup: its `zero` column says what the setup column cannot
    directory = _demo(tmp_path, setups=("z0", "z1"))
    refused = directory / "zero-z1"
    (refused / "train.log").unlink()
    (refused / "run.json").unlink()
    (refused / "status.json").write_text(json.dumps({"state": "refused", "cause": "checks refused it"}))
    assert main(["summarize", str(directory), "--no-plots"]) == 0
    header = (directory / "summary.md").read_text().splitlines()[0].split(" | ")
    assert header[:3] == ["| run", "zero", "setup"]


def test_cells_of_two_sweeps_are_named_by_their_sweep(tmp_path: Path, capsys, monkeypatch, figures):
    _demo(tmp_path / "sweeps", "demo", "final", ("z0", "z1"))
    _demo(tmp_path / "sweeps", "demo_bf16", "bf16", ("z0", "z1"))
    names = ["demo/zero-z0", "demo/zero-z1", "demo_bf16/zero-z0", "demo_bf16/zero-z1"]
    monkeypatch.setenv("COLUMNS", "250")
    assert main(["summarize", str(tmp_path / "sweeps"), "--out", str(tmp_path / "out")]) == 0
    printed = capsys.readouterr().out
    assert all(f"│ {name} " in printed for name in names) and "(zero-z0)" not in printed
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert [row["name"] for row in summary["runs"]] == names
    assert [text.get_text() for text in figures["loss.png"].legends[0].get_texts()] == names
    bars = [label.get_text() for label in figures["throughput.png"].axes[0].get_yticklabels()]
    assert bars == names
    assert (tmp_path / "out" / "sweep-demo-zero.png").exists()  # each sweep's own figure
    assert (tmp_path / "out" / "sweep-demo_bf16-zero.png").exists()
    assert (
        main(["compare", str(tmp_path / "sweeps"), "--baseline", "demo_bf16/zero-z0", "--format", "json"])
        == 0
    )
    result = json.loads(capsys.readouterr().out)
    assert result["baseline"] == "demo_bf16/zero-z0" and result["runs"] == names


def test_one_sweep_keeps_its_cells_names(tmp_path: Path, capsys):
    directory = _demo(tmp_path, setups=("z0", "z1"))
    assert main(["summarize", str(directory), "--no-plots", "--format", "json"]) == 0
    assert [row["name"] for row in json.loads(capsys.readouterr().out)["runs"]] == ["zero-z0", "zero-z1"]


def test_two_sweeps_of_one_name_get_a_figure_each_named_by_their_folder(tmp_path: Path, capsys):
    """`demo` of two checkouts summarized together: two figures, not one written over the other."""
    _demo(tmp_path / "a", "demo", "final", ("z0", "z1"))
    _demo(tmp_path / "b", "demo", "bf16", ("z0", "z1", "z2"))
    out = tmp_path / "out"
    assert main(["summarize", str(tmp_path / "a"), str(tmp_path / "b"), "--out", str(out)]) == 0
    assert sorted(path.name for path in out.glob("sweep-*.png")) == [
        "sweep-a_demo-zero.png",
        "sweep-b_demo-zero.png",
    ]
    names = [row["name"] for row in json.loads((out / "summary.json").read_text())["runs"]]
    assert names == ["a/demo/zero-z0", "a/demo/zero-z1", "b/demo/zero-z0", "b/demo/zero-z1", "b/demo/zero-z2"]
