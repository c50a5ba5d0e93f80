"""`zerolab compare`: each run's status beside its numbers, no ratio for a run that did not complete,
and one rule for the baseline (as its help says): --baseline, a run name or a run directory, else
the first run given."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rich.cells import cell_len
from summarize_helpers import CPU, make_run_dir

from zerolab.cli import main


def _compare(capsys, *argv: str) -> dict:
    assert main(["compare", *argv, "--format", "json"]) == 0, capsys.readouterr().err
    return json.loads(capsys.readouterr().out)


def _refused(capsys, *argv: str) -> str:
    assert main(["compare", *argv]) == 2
    return capsys.readouterr().err


def test_a_run_that_did_not_complete_shows_its_status_and_no_ratio(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "250")  # the status in one line of the table
    result = _compare(capsys, str(CPU / "final_z0.log"), str(CPU / "fp16_z2.log"))
    assert result["status"]["final_z0"] == {"status": "completed", "cause": None}
    assert result["status"]["fp16_z2"]["status"] == "failed"
    assert "fp16 is not supported" in result["status"]["fp16_z2"]["cause"]
    memory = result["metrics"]["max_allocated_GiB"]["values"]
    assert memory["fp16_z2"] == {"value": None, "ratio": None}  # it never trained: its 0.43 GiB is no figure
    assert memory["final_z0"]["ratio"] == 1.0
    assert main(["compare", str(CPU / "final_z0.log"), str(CPU / "fp16_z2.log")]) == 0
    printed = capsys.readouterr().out
    assert "0.73x" not in printed and "0.43" not in printed
    assert "failed: exception: ValueError: Type fp16 is not supported" in " ".join(printed.split())


@pytest.mark.parametrize("baseline", [None, "fp16_z2"])
def test_a_baseline_that_did_not_complete_is_refused(baseline, capsys):
    argv = [str(CPU / "fp16_z2.log"), str(CPU / "final_z0.log")]
    err = _refused(capsys, *argv, *(["--baseline", baseline] if baseline else []))
    assert "baseline fp16_z2 did not complete (failed" in err
    assert "--baseline final_z0" in err  # the completed runs to choose from


def test_the_default_baseline_is_the_first_run_given(capsys):
    # the summary's order would put final_z0 (dp) first; the rule is the order given
    result = _compare(capsys, str(CPU / "final_z3off.log"), str(CPU / "final_z0.log"))
    assert result["baseline"] == "final_z3off"
    assert result["runs"] == ["final_z3off", "final_z0"]
    assert result["metrics"]["tokens_per_s_per_gpu"]["values"]["final_z3off"]["ratio"] == 1.0


def test_a_directory_given_first_gives_its_first_run_in_the_summary_order(tmp_path: Path, capsys):
    for name in ("final_z3", "final_z1"):
        make_run_dir(tmp_path / "study", name, name)
    other = make_run_dir(tmp_path, "final_z0", "final_z0")
    result = _compare(capsys, str(tmp_path / "study"), str(other))
    assert result["runs"] == ["final_z1", "final_z3", "final_z0"] and result["baseline"] == "final_z1"


def test_the_help_states_the_rule(capsys):
    with pytest.raises(SystemExit):
        main(["compare", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "else the first run given" in help_text
    assert "a run name or a run directory" in help_text


def _recipe_run_twice(root: Path) -> tuple[Path, Path, Path]:
    first = make_run_dir(root, "tiny_z1", "final_z1", stamp="20260101-000000")
    second = make_run_dir(root, "tiny_z1", "bf16_z1", stamp="20260102-000000")
    other = make_run_dir(root, "tiny_z3", "final_z3")
    return first, second, other


def test_a_name_run_twice_is_ambiguous_and_lists_the_candidates(tmp_path: Path, capsys):
    first, second, _ = _recipe_run_twice(tmp_path)
    err = _refused(capsys, str(tmp_path), "--baseline", "tiny_z1")
    assert "--baseline tiny_z1 names 2 runs" in err
    assert f"tiny_z1 (20260101-000000): {first}" in err and f"tiny_z1 (20260102-000000): {second}" in err


@pytest.mark.parametrize("which", ["run directory", "its train.log", "shown name"])
def test_the_baseline_can_be_a_run_directory_or_the_name_the_summary_shows(which, tmp_path: Path, capsys):
    _, second, _ = _recipe_run_twice(tmp_path)
    baseline = {
        "run directory": str(second),
        "its train.log": str(second / "train.log"),
        "shown name": "tiny_z1 (20260102-000000)",
    }[which]
    result = _compare(capsys, str(tmp_path), "--baseline", baseline)
    assert result["baseline"] == "tiny_z1 (20260102-000000)"
    tokens = result["metrics"]["tokens_per_s_per_gpu"]["values"]
    assert tokens["tiny_z1 (20260102-000000)"]["ratio"] == 1.0
    assert tokens["tiny_z1 (20260101-000000)"]["ratio"] != 1.0


def test_a_unique_name_is_enough(tmp_path: Path, capsys):
    _recipe_run_twice(tmp_path)
    assert _compare(capsys, str(tmp_path), "--baseline", "tiny_z3")["baseline"] == "tiny_z3"


def test_a_directory_of_several_runs_as_baseline_is_ambiguous(tmp_path: Path, capsys):
    _recipe_run_twice(tmp_path)
    err = _refused(capsys, str(tmp_path), "--baseline", str(tmp_path / "tiny_z1"))
    assert "names 2 runs" in err


def _unreadable(root: Path) -> tuple[Path, Path]:
    """A log with nothing a training run prints, and a folder holding no run."""
    log = root / "notes.log"
    log.write_text("nothing a training run prints\n")
    (root / "empty").mkdir()
    return log, root / "empty"


def test_compare_of_a_run_and_an_unreadable_log_names_the_log(tmp_path: Path, capsys):
    log, _ = _unreadable(tmp_path)
    err = " ".join(_refused(capsys, str(CPU / "final_z0.log"), str(log)).split())
    assert "compare needs at least two runs; found 1 (final_z0); not summarized: " + str(log) in err
    assert f"warning: not summarized: {log}: no line this tool knows in 1 lines" in err


def test_compare_names_each_input_it_skips_with_why(tmp_path: Path, capsys):
    log, empty = _unreadable(tmp_path)
    argv = [str(CPU / "final_z0.log"), str(log), str(empty), str(CPU / "final_z1.log")]
    assert main(["compare", *argv, "--format", "json"]) == 0
    printed = capsys.readouterr()
    result = json.loads(printed.out)
    assert result["runs"] == ["final_z0", "final_z1"]
    reasons = {entry["path"]: entry["reason"] for entry in result["skipped"]}
    assert reasons.keys() == {str(log), str(empty)}
    assert reasons[str(log)].startswith("no line this tool knows")
    assert reasons[str(empty)].startswith("no run directory (with run.json or train.log) and no log file")
    err = " ".join(printed.err.split())
    for path, reason in reasons.items():
        assert f"warning: not summarized: {path}: {reason}" in err
    assert main(["compare", *argv]) == 0  # the table too: each named, on stderr
    err = capsys.readouterr().err
    assert all(f"not summarized: {path}" in err for path in reasons)


def test_summarize_names_each_input_it_skips_with_why(tmp_path: Path, capsys):
    log, empty = _unreadable(tmp_path)
    argv = [str(CPU / "final_z0.log"), str(log), str(empty), "--out", str(tmp_path / "out"), "--no-plots"]
    assert main(["summarize", *argv, "--format", "json"]) == 0
    printed = capsys.readouterr()
    skipped = {entry["path"]: entry["reason"] for entry in json.loads(printed.out)["skipped"]}
    assert skipped.keys() == {str(log), str(empty)}
    err = " ".join(printed.err.split())
    markdown = (tmp_path / "out" / "summary.md").read_text()
    for path, reason in skipped.items():
        assert f"warning: not summarized: {path}: {reason}" in err
        assert f"- Not summarized: {path}: {reason}" in markdown


@pytest.mark.parametrize("columns", ["80", None])  # None: output redirected, rich's 80 columns
def test_at_80_columns_every_run_and_number_is_shown_whole(columns, capsys, monkeypatch):
    if columns:
        monkeypatch.setenv("COLUMNS", columns)
    else:
        monkeypatch.delenv("COLUMNS", raising=False)
    names = ("final_z0", "final_z1", "final_z2", "final_z3", "final_z3off", "fp16_z2")
    assert main(["compare", *(str(CPU / f"{name}.log") for name in names)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert max(cell_len(line) for line in lines) <= 80
    text = " ".join(" ".join(lines).split())
    assert "…" not in text  # nothing cut short
    assert all(f" {name} " in text for name in names) and "(baseline)" in text
    for number in ("1,096", "(1.00x)", "830.5", "(0.76x)", "[higher", "completed"):
        assert number in text
