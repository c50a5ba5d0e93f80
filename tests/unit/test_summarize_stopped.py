"""A run stopped on purpose (Ctrl-C, SIGTERM) is `killed` by what stopped it, as its status.json
says, in `zerolab summarize`, `tools/summarize`, `zerolab compare` and the loss plot: not a crash
read from what torchrun printed as it stopped (`SignalException: Process N got signal: 15`). A log
without status.json (someone else's) keeps the reading of its lines."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from summarize_helpers import CPU, REAL, make_run_dir

from zerolab.cli import main
from zerolab.logs.parse import parse_log
from zerolab.summarize import plots

STOPPED_BY = {"Ctrl-C": ("SIGINT (Ctrl-C)", 130), "SIGTERM": ("SIGTERM", 143)}


def _stopped_log(before_stop: str = "") -> str:
    """The real CPU-engine log of tiny_z1 up to iteration 10, then (`before_stop`, then) the lines
    torchrun prints when it is sent SIGTERM (as zerolab's launch does on Ctrl-C or SIGTERM), from a
    real train.log: `Received 15 death signal` ... `SignalException: Process 20140 got signal: 15`."""
    lines = (CPU / "final_z1.log").read_text().splitlines(keepends=True)
    end = next(i for i, line in enumerate(lines) if line.startswith(" iteration       10/")) + 1
    stopping = (CPU / "two_nodes_sigkill_rank1.log").read_text().splitlines(keepends=True)
    start = next(i for i, line in enumerate(stopping) if "Received 15 death signal" in line)
    assert stopping[-1].startswith("torch.distributed.elastic.multiprocessing.api.SignalException")
    return "".join([*lines[:end], before_stop, *stopping[start:]])


def _stopped_run(root: Path, how: str, before_stop: str = "") -> Path:
    """A run directory as `zerolab launch` leaves one it stopped: status.json `killed`, its cause."""
    directory = make_run_dir(root, "tiny_z1", "final_z1")
    (directory / "train.log").write_text(_stopped_log(before_stop))
    by, code = STOPPED_BY[how]
    status = {"state": "killed", "exit_code": code, "cause": f"stopped by {by}"}
    (directory / "status.json").write_text(json.dumps(status))
    return directory


def _json(capsys, *argv: str) -> dict[str, Any]:
    assert main([*argv, "--format", "json"]) == 0, capsys.readouterr().err
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("how", list(STOPPED_BY))
def test_a_stopped_run_is_killed_by_what_stopped_it(how, tmp_path: Path, capsys, monkeypatch):
    _stopped_run(tmp_path / "logs", how)
    cause = f"stopped by {STOPPED_BY[how][0]}"
    row = _json(capsys, "summarize", str(tmp_path / "logs"), "--out", str(tmp_path / "out"))["runs"][0]
    assert (row["status"], row["cause_kind"], row["cause"]) == ("killed", "killed", cause)
    assert row["iterations_done"] == 10
    assert not [note for note in row["notes"] if "before it was stopped" in note]
    monkeypatch.setenv("COLUMNS", "250")
    assert main(["summarize", str(tmp_path / "logs"), "--out", str(tmp_path / "out"), "--no-plots"]) == 0
    printed = " ".join(capsys.readouterr().out.split())
    assert f"killed: {cause}" in printed
    assert "SignalException" not in printed and "failed" not in printed
    assert f"| killed: {cause} |" in (tmp_path / "out" / "summary.md").read_text()


def test_tools_summarize_says_killed_by_ctrl_c(tmp_path: Path, repo_root: Path):
    _stopped_run(tmp_path / "logs", "Ctrl-C")
    result = subprocess.run(
        [str(repo_root / "tools" / "summarize"), str(tmp_path / "logs"), "--no-plots"],
        capture_output=True,
        text=True,
        timeout=120,
        env=os.environ | {"COLUMNS": "250"},
    )
    assert result.returncode == 0, result.stderr
    printed = " ".join(result.stdout.split())
    assert "killed: stopped by SIGINT (Ctrl-C)" in printed and "SignalException" not in printed


def test_compare_shows_a_stopped_run_as_killed_with_no_ratio(tmp_path: Path, capsys, monkeypatch):
    stopped = _stopped_run(tmp_path / "logs", "Ctrl-C")
    base = make_run_dir(tmp_path / "logs", "tiny_z0", "final_z0", state="completed")
    result = _json(capsys, "compare", str(base), str(stopped))
    assert result["status"]["tiny_z1"] == {"status": "killed", "cause": "stopped by SIGINT (Ctrl-C)"}
    assert result["metrics"]["tokens_per_s_per_gpu"]["values"]["tiny_z1"]["ratio"] is None
    monkeypatch.setenv("COLUMNS", "200")
    assert main(["compare", str(base), str(stopped)]) == 0
    printed = " ".join(capsys.readouterr().out.split())
    assert "killed: stopped by SIGINT (Ctrl-C)" in printed and "SignalException" not in printed


def test_the_loss_plot_legend_says_killed(tmp_path: Path, monkeypatch):
    _stopped_run(tmp_path / "logs", "Ctrl-C")
    make_run_dir(tmp_path / "logs", "tiny_z0", "final_z0", state="completed")
    figures: dict[str, Any] = {}
    monkeypatch.setattr(plots, "save_png", lambda figure, path, **_: figures.setdefault(path.name, figure))
    assert main(["summarize", str(tmp_path / "logs"), "--out", str(tmp_path / "out")]) == 0
    legend = [text.get_text() for text in figures["loss.png"].legends[0].get_texts()]
    assert legend == ["tiny_z0", "tiny_z1 (killed)"]
    note = figures["throughput.png"].get_supxlabel()
    assert note == "not drawn (did not complete): tiny_z1 (killed)"


def test_a_log_without_status_json_keeps_its_own_reading(tmp_path: Path, capsys):
    # someone else's log: nothing says it was stopped on purpose, so it is read from its lines
    log = tmp_path / "theirs.log"
    log.write_text(_stopped_log())
    row = _json(capsys, "summarize", str(log), "--out", str(tmp_path / "out"))["runs"][0]
    assert (row["status"], row["cause_kind"]) == ("failed", "exception")
    assert row["cause"] == "exception: SignalException: Process 20140 got signal: 15"


def test_a_failure_before_the_stop_is_noted(tmp_path: Path, capsys):
    # out of memory, then the run hung until its user stopped it: killed, and the OOM in its notes
    oom = (REAL / "bigscience_oom-nccl-abort.log").read_text().splitlines(keepends=True)[4]
    assert "CUDA out of memory" in oom
    directory = _stopped_run(tmp_path / "logs", "Ctrl-C", before_stop=oom)
    lines = (directory / "train.log").read_text().splitlines()
    number = next(n for n, line in enumerate(lines, 1) if "CUDA out of memory" in line)
    row = _json(capsys, "summarize", str(tmp_path / "logs"), "--out", str(tmp_path / "out"))["runs"][0]
    assert (row["status"], row["cause"]) == ("killed", "stopped by SIGINT (Ctrl-C)")
    noted = [note for note in row["notes"] if "before it was stopped" in note]
    assert len(noted) == 1 and noted[0].startswith(
        f"train.log:{number}: before it was stopped: out of memory: CUDA out of memory. Tried to allocate"
    )


def test_a_log_cut_inside_a_traceback_or_with_tracebacks_of_several_hosts_is_a_failed_run(tmp_path: Path):
    cut = tmp_path / "cut.log"  # frames, no exception line yet
    cut.write_text(
        'starting\nTraceback (most recent call last):\n  File "pretrain_gpt.py", line 3, in <module>\n'
    )
    hosts = tmp_path / "hosts.log"  # pdsh's prefixes, no iteration line
    hosts.write_text(
        "".join(
            f"10.0.1.10{n}: {text}\n"
            for text in (
                "Traceback (most recent call last):",
                '  File "pretrain_gpt.py", line 3, in <module>',
            )
            for n in (1, 2)
        )
        + "10.0.1.101: RuntimeError: NCCL error in: init\n10.0.1.102: RuntimeError: NCCL error in: init\n"
    )
    causes = {}
    for path in (cut, hosts):
        failure = parse_log(path).ending.failure
        assert failure is not None and failure.kind == "exception", path.name
        causes[path.name] = failure.detail
    assert causes == {
        "cut.log": "the log ends inside a traceback",
        "hosts.log": "RuntimeError: NCCL error in: init (tracebacks on 10.0.1.101, 10.0.1.102)",
    }


@pytest.mark.parametrize(
    ("state", "code", "cause"),
    [
        ("killed", 137, "exit code 137: killed by SIGKILL (signal 9)"),
        ("failed", 137, "exit code 137: killed by SIGKILL (signal 9)"),
        ("failed", -9, "exit code -9: killed by SIGKILL (signal 9)"),
        ("failed", 134, "exit code 134: killed by SIGABRT (signal 6)"),
    ],
)
def test_a_run_ended_by_a_signal_without_a_cause_says_which(state, code, cause, tmp_path: Path, capsys):
    """A job's status.json (a SLURM script's: state and exit code, no cause) over a log that ends
    without a word (the OOM killer, a scheduler): the signal its exit code means, not the number."""
    directory = make_run_dir(tmp_path / "logs", "tiny_z1", "final_z1")
    lines = (directory / "train.log").read_text().splitlines(keepends=True)
    end = next(i for i, line in enumerate(lines) if line.startswith(" iteration       10/")) + 1
    (directory / "train.log").write_text("".join(lines[:end]))
    (directory / "status.json").write_text(json.dumps({"state": state, "exit_code": code, "cause": None}))
    row = _json(capsys, "summarize", str(tmp_path / "logs"), "--no-plots")["runs"][0]
    assert row["status"] == state and row["cause"].startswith(cause)
    if code in (137, -9):
        assert "OOM killer" in row["cause"] and "scheduler" in row["cause"]
