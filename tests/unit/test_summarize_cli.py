"""`zerolab summarize`, `tools/summarize` and `zerolab compare` end to end, on run
directories built from the real CPU-engine logs and on plain logs."""

from __future__ import annotations

import json
import os
import random
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from summarize_helpers import make_run_dir

from zerolab.cli import main

CPU = Path(__file__).parents[1] / "fixtures" / "logs" / "cpu-engine"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _run_dir(root: Path, name: str, log: str, **run: object) -> Path:
    directory = root / name / "20260101-000000"
    directory.mkdir(parents=True)
    shutil.copy(CPU / f"{log}.log", directory / "train.log")
    facts = {"name": name, "model": "gpt2-tiny", "epoch_tokens": None} | run
    (directory / "run.json").write_text(json.dumps(facts))
    return directory


def _summary(capsys, *argv: str) -> dict:
    assert main(["summarize", *argv, "--format", "json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_run_directories_use_run_json_samples_and_status(tmp_path: Path, capsys):
    directory = _run_dir(tmp_path, "tiny_z1", "final_z1", epoch_tokens=1_000_000, world_size=2)
    (directory / "samples.csv").write_text(
        "elapsed_s,process_tree_rss_MiB,system_used_MiB\n0,512.0,9000\n1,2048.0,9100\n2,,9200\n"
    )
    (directory / "status.json").write_text(
        json.dumps({"state": "killed", "exit_code": -9, "cause": "SIGKILL"})
    )
    (directory / "doctor.json").write_text(json.dumps({"devices": [{"name": "NVIDIA H100 80GB HBM3"}]}))
    row = _summary(capsys, str(tmp_path), "--out", str(tmp_path / "out"))["runs"][0]
    assert (row["name"], row["model"]) == ("tiny_z1", "gpt2-tiny")
    assert row["peak_host_GiB"] == 2.0 and row["peak_host_source"] == "samples.csv (process tree RSS)"
    assert (row["status"], row["cause_kind"], row["cause"]) == ("killed", "killed", "SIGKILL")
    assert row["epoch_time_s"] == pytest.approx(1_000_000 / (row["tokens_per_s_per_gpu"] * 2))
    assert row["peak_tflops"] == 989.4
    assert row["mfu_pct"] == pytest.approx(100 * row["tflops_per_gpu"] / 989.4, rel=1e-2)


def test_unknown_values_are_null_never_zero(tmp_path: Path, capsys):
    directory = tmp_path / "run"
    directory.mkdir()
    (directory / "train.log").write_text((CPU / "fp16_z2.log").read_text())
    (directory / "run.json").write_text(json.dumps({"name": "fp16", "epoch_tokens": None, "model": None}))
    row = _summary(capsys, str(directory), "--out", str(tmp_path))["runs"][0]
    for key in (
        "tokens_per_s_per_gpu",
        "ms_per_iter",
        "epoch_time_s",
        "tflops_per_gpu",
        "mfu_pct",
        "first_loss",
    ):
        assert row[key] is None, key
    csv_text = (tmp_path / "summary.csv").read_text()
    header, values = csv_text.splitlines()[:2]
    assert values.split(",")[header.split(",").index("tokens_per_s_per_gpu")] == ""


def test_peak_tflops_option_gives_mfu(capsys, tmp_path: Path):
    row = _summary(capsys, str(CPU / "final_z1.log"), "--peak-tflops", "0.1", "--out", str(tmp_path))["runs"][
        0
    ]
    assert row["peak_tflops_source"] == "--peak-tflops"
    assert row["mfu_pct"] == pytest.approx(100 * row["tflops_per_gpu"] / 0.1, rel=1e-2)


def test_warmup_option_changes_the_steady_state_and_is_stated(capsys, tmp_path: Path):
    out = _summary(capsys, str(CPU / "final_z1.log"), "--warmup", "15", "--out", str(tmp_path))
    assert out["warmup"] == "warm-up excluded: iterations 1-15, and at least the first logged interval"
    assert out["runs"][0]["steady_intervals"] == 1
    assert out["runs"][0]["tokens_per_s_per_gpu"] == 1476.722


def test_tools_summarize_writes_tables_and_plots_in_setup_order(tmp_path: Path, repo_root: Path):
    logs = tmp_path / "logs"
    logs.mkdir()
    for name in ("final_z3off", "final_z0", "final_z2", "final_z1", "final_z3"):
        shutil.copy(CPU / f"{name}.log", logs)
    (logs / "notes.txt").write_text("nothing a training run prints\n")
    result = subprocess.run(
        [str(repo_root / "tools" / "summarize"), str(logs)], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert "final_z1" in result.stdout and "Not summarized" in result.stdout
    summary = json.loads((logs / "summary.json").read_text())
    assert [row["setup"] for row in summary["runs"]] == ["z0", "z1", "z2", "z3", "z3_offload"]
    assert summary["skipped"][0]["path"].endswith("notes.txt")
    assert "no line this tool knows" in summary["skipped"][0]["reason"]
    markdown = (logs / "summary.md").read_text()
    assert markdown.count("| final_z") == 5 and "warm-up excluded" in markdown
    example = (repo_root / "docs" / "summarize.md").read_text()
    shown = [line for line in example.splitlines() if line.startswith(("| run |", "| final_z"))]
    assert len(shown) == 6 and all(line in markdown.splitlines() for line in shown), (
        "docs/summarize.md's example is not what summarize writes for these logs"
    )
    for plot in ("throughput.png", "epoch_time.png", "gpu_memory.png", "host_memory.png", "loss.png"):
        assert (logs / plot).read_bytes().startswith(PNG_MAGIC), plot


def test_a_plot_whose_metric_no_run_has_is_skipped_with_the_reason(tmp_path: Path):
    # a completed HF Trainer run under DeepSpeed: memory, but no throughput, epoch or host figures
    shutil.copy(
        Path(__file__).parents[1]
        / "fixtures"
        / "logs"
        / "real"
        / "deepspeed_hf-trainer-gpt2-zero3-cr-multirank.log",
        tmp_path,
    )
    result = subprocess.run(
        [sys.executable, "-m", "zerolab", "summarize", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    printed = " ".join(result.stdout.split())
    assert "no plot throughput.png: no run has tokens_per_s_per_gpu" in printed
    assert "no plot epoch_time.png: no run has epoch_time_s" in printed
    assert not (tmp_path / "throughput.png").exists() and not (tmp_path / "epoch_time.png").exists()
    assert (tmp_path / "gpu_memory.png").exists()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["summarize", "no/such/dir"], "no/such/dir: no such file or directory"),
        (["summarize", str(CPU / "final_z1.log"), "--warmup", "abc"], "--warmup 'abc'"),
        (["compare", str(CPU / "final_z1.log")], "compare needs at least two runs"),
        (
            ["compare", str(CPU / "final_z0.log"), str(CPU / "final_z1.log"), "--baseline", "z9"],
            "'z9' is not one of",
        ),
    ],
)
def test_bad_input_exits_2_with_a_message(argv, message, capsys, tmp_path: Path):
    assert main([*argv, *(["--out", str(tmp_path)] if argv[0] == "summarize" else [])]) == 2
    err = capsys.readouterr().err
    assert message in err and err.startswith("zerolab: error: ")  # no blank line before it


def test_nothing_understood_exits_2(tmp_path: Path, capsys):
    (tmp_path / "random.log").write_bytes(bytes(range(256)) * 4)
    assert main(["summarize", str(tmp_path)]) == 2
    assert "no run could be summarized" in capsys.readouterr().err
    assert not (tmp_path / "summary.json").exists()


def test_compare_gives_the_ratio_of_each_metric(capsys):
    argv = ["compare", str(CPU / "final_z0.log"), str(CPU / "final_z3off.log"), "--baseline", "final_z0"]
    assert main([*argv, "--format", "json"]) == 0
    result = json.loads(capsys.readouterr().out)
    tokens = result["metrics"]["tokens_per_s_per_gpu"]["values"]
    assert tokens["final_z0"]["ratio"] == 1.0
    expected = tokens["final_z3off"]["value"] / tokens["final_z0"]["value"]
    assert tokens["final_z3off"]["ratio"] == pytest.approx(expected, abs=1e-4)
    assert main(argv) == 0
    assert "ratio to baseline final_z0" in capsys.readouterr().out


@pytest.mark.parametrize(("umask", "mode"), [(0o022, 0o644), (0o077, 0o600)])
def test_summaries_and_plots_get_the_permissions_of_any_new_file(umask: int, mode: int, tmp_path: Path):
    """summary.md/.csv/.json were once written 0600 (a private temporary file renamed into place)
    while the PNGs were 0644: every output follows the umask, as any file a user creates."""
    for name in ("final_z0", "final_z1"):
        shutil.copy(CPU / f"{name}.log", tmp_path)
    result = subprocess.run(
        [sys.executable, "-m", "zerolab", "summarize", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=lambda: os.umask(umask),
    )
    assert result.returncode == 0, result.stderr
    outputs = [
        *(tmp_path / name for name in ("summary.md", "summary.csv", "summary.json")),
        *tmp_path.glob("*.png"),
    ]
    assert len(outputs) == 8
    assert {path.name: stat.S_IMODE(path.stat().st_mode) for path in outputs} == {
        path.name: mode for path in outputs
    }


def _cut_after_iteration(log: Path, iteration: int, cut_into_next: bool) -> str:
    """The real log up to `iteration`'s line, and (with `cut_into_next`) half of the next one."""
    text = log.read_text()
    lines = text.splitlines(keepends=True)
    marker = f" iteration {iteration:>8}/"
    end = next(i for i, line in enumerate(lines) if line.startswith(marker)) + 1
    following = next(i for i in range(end, len(lines)) if lines[i].startswith(" iteration "))
    kept = "".join(lines[:end] + lines[end:following])
    return kept + (lines[following][: len(lines[following]) // 2] if cut_into_next else "")


def test_a_completed_run_whose_log_stops_early_is_truncated_at_its_last_iteration(tmp_path: Path, capsys):
    """status.json says completed (as a copied or cut-off log leaves it); the log says otherwise."""
    directory = make_run_dir(tmp_path / "logs", "tiny_z1", "final_z1", state="completed")
    (directory / "train.log").write_text(_cut_after_iteration(CPU / "final_z1.log", 10, cut_into_next=True))
    row = _summary(capsys, str(tmp_path / "logs"), "--out", str(tmp_path / "out"))["runs"][0]
    assert row["status"] == "truncated"
    assert row["cause"] == "status.json says completed, but train.log ends at iteration 10 of 20"
    assert row["iterations_done"] == 10  # the half line is no iteration 15 of NaNs
    assert any("the file ends inside this iteration line (left out)" in note for note in row["notes"])
    assert row["anomalies"] == []


def test_a_completed_run_whose_log_is_noise_is_truncated_with_no_figures(tmp_path: Path, capsys):
    directory = make_run_dir(tmp_path / "logs", "tiny_z1", "final_z1", state="completed")
    (directory / "train.log").write_bytes(random.Random(5).randbytes(20_000))
    row = _summary(capsys, str(tmp_path / "logs"), "--out", str(tmp_path / "out"))["runs"]
    assert [(r["status"], r["cause"]) for r in row] == [
        ("truncated", "status.json says completed, but train.log holds no iteration line")
    ]


def test_a_run_that_never_reached_iteration_1_has_no_figures_and_no_estimate(tmp_path: Path, capsys):
    """The real log of a run that died at start up, after DeepSpeed reported its memory."""
    directory = make_run_dir(tmp_path / "logs", "tiny_z1", "final_z1", state="failed")
    lines = (CPU / "final_z1.log").read_text().splitlines(keepends=True)
    first_step = next(
        i for i, line in enumerate(lines) if "CurrSamplesPerSec" in line or " iteration " in line
    )
    assert any("Max_MA 0.43 GB" in line for line in lines[:first_step])  # DeepSpeed's memory at start
    (directory / "train.log").write_text("".join(lines[:first_step]))
    row = _summary(capsys, str(tmp_path / "logs"), "--out", str(tmp_path / "out"))["runs"][0]
    assert row["status"] == "failed" and row["iterations_done"] is None
    for key in ("max_allocated_GiB", "peak_host_GiB", "estimated_peak_GiB", "estimate_error_pct",
                "tokens_per_s_per_gpu"):  # fmt: skip
        assert row[key] is None, key
