"""`zerolab sweep` on the real engine: the tiny GPT-2 on CPU, two ranks, 2 iterations a cell, over
two datasets (one whose tokens lie beyond the vocabulary: whole by every check before launch, its
cell crashes at run time) and two micro batches (3 does not
divide the global batch: refused by the checks). One sweep, run as a user would: stopped with
Ctrl-C in its first cell, run again (the unfinished cells run: one completes, one fails), run
again (nothing runs), then with --retry-failed once the data is fixed (only the failed cell
runs). Skipped, with the reason, when the engine is not set up. About 4 cells' worth of runs."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from engine_runs import SEQ_LENGTH
from rich.console import Console

from zerolab import rundir
from zerolab.backends.local import free_port
from zerolab.cli import main
from zerolab.commands.demo import evaluate_cells
from zerolab.recipe.compose import load_recipe
from zerolab.recipe.length import save_interval
from zerolab.summarize.collect import summarize_paths
from zerolab.summarize.summary import Options
from zerolab.summarize.sweep_plots import axis, points
from zerolab.summarize.tables import to_markdown
from zerolab.sweep.values import value_text

NAME = "tiny"
GOOD, BROKEN = "data/good_text_document", "data/broken_text_document"
CELLS = {
    (GOOD, 2): "data.path-data_good_text_document_train.micro_batch_size-2",
    (GOOD, 3): "data.path-data_good_text_document_train.micro_batch_size-3",
    (BROKEN, 2): "data.path-data_broken_text_document_train.micro_batch_size-2",
    (BROKEN, 3): "data.path-data_broken_text_document_train.micro_batch_size-3",
}


@pytest.fixture(scope="module")
def work(engine, dataset, tmp_path_factory) -> Path:
    """A directory to run the sweep from: data/good (the dolly sample) and data/broken (its .bin
    overwritten with token 65535, beyond GPT-2's vocabulary: the index and sizes are whole, so the
    launch checks pass, and the ranks fail on their first batch)."""
    directory = tmp_path_factory.mktemp("sweep")
    (directory / "data").mkdir()
    for suffix in (".bin", ".idx"):
        shutil.copy(dataset + suffix, directory / f"{GOOD}{suffix}")
    shutil.copy(dataset + ".idx", directory / f"{BROKEN}.idx")
    (directory / f"{BROKEN}.bin").write_bytes(b"\xff" * Path(dataset + ".bin").stat().st_size)
    return directory


@pytest.fixture(scope="module")
def words() -> list[str]:
    """The sweep command's words (one rendezvous port for every cell: they run one at a time)."""
    return [
        "sweep",
        "cpu/tiny_dp",
        f"data.path='{GOOD}','{BROKEN}'",
        "train.micro_batch_size=2,3",
        "train.iters=2",
        "train.lr_warmup_iters=1",
        "train.log_interval=1",
        "train.eval_iters=1",
        f"model.seq_length={SEQ_LENGTH}",
        "train.save_interval=null",
        "train.save_interval_epochs=0.001",  # a checkpoint every iteration, given in epochs
        f"hardware.master_port={free_port()}",
        "--name",
        NAME,
    ]


def sweep_dir(work: Path) -> Path:
    return work / "logs" / "sweeps" / NAME


def state(work: Path, cell: tuple[str, int]) -> str | None:
    status, _ = rundir.read_status(sweep_dir(work) / CELLS[cell])
    return status.state if status else None


def statuses(work: Path) -> dict[str, str]:
    """Every cell's status.json, as written."""
    return {name: (sweep_dir(work) / name / "status.json").read_text() for name in CELLS.values()}


@contextlib.contextmanager
def inside(directory: Path) -> Iterator[None]:
    """The current directory is `directory` meanwhile (contextlib.chdir needs Python 3.11)."""
    before = Path.cwd()
    os.chdir(directory)
    try:
        yield
    finally:
        os.chdir(before)


def run_sweep(work: Path, words: list[str], *extra: str) -> tuple[int, float, str]:
    """`zerolab sweep` in-process from `work`: its exit status, seconds and output."""
    started = time.monotonic()
    out = io.StringIO()
    with inside(work), contextlib.redirect_stdout(out):
        code = main([*words, *extra])
    return code, time.monotonic() - started, out.getvalue()


@pytest.fixture(scope="module")
def interrupted(work, words) -> tuple[int, str]:
    """The sweep started as a user would, stopped with Ctrl-C once its first cell's ranks print."""
    log = sweep_dir(work) / CELLS[(GOOD, 2)] / rundir.LOG_FILE
    printed = work / "interrupted.out"
    with printed.open("w") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "zerolab", *words], cwd=work, stdout=out, stderr=subprocess.STDOUT
        )
        deadline = time.monotonic() + 300
        while not (log.is_file() and log.stat().st_size > 0):
            assert process.poll() is None, printed.read_text()[-3000:]
            assert time.monotonic() < deadline, "the first cell never started"
            time.sleep(0.2)
        process.send_signal(signal.SIGINT)
        code = process.wait(timeout=120)
    return code, printed.read_text()


@pytest.fixture(scope="module")
def resumed(work, words, interrupted) -> tuple[int, float, str, dict]:
    """The same command again: the unfinished cells run. Also returns its summary.json."""
    code, seconds, out = run_sweep(work, words)
    return code, seconds, out, json.loads((sweep_dir(work) / "summary.json").read_text())


@pytest.fixture(scope="module")
def again(work, words, resumed) -> tuple[int, str, dict[str, str], dict[str, str]]:
    """The same command once more: nothing to run. Also returns the statuses before and after."""
    before = statuses(work)
    code, _, out = run_sweep(work, words)
    return code, out, before, statuses(work)


@pytest.fixture(scope="module")
def retried(work, words, again) -> tuple[int, float, str, dict[str, str], dict[str, str]]:
    """The data fixed, then --retry-failed: only the failed cell runs."""
    shutil.copy(work / f"{GOOD}.bin", work / f"{BROKEN}.bin")
    before = statuses(work)
    code, seconds, out = run_sweep(work, words, "--retry-failed")
    return code, seconds, out, before, statuses(work)


def test_ctrl_c_stops_the_running_cell_and_the_sweep(work, interrupted):
    code, printed = interrupted
    assert code == 130, printed[-3000:]
    status, _ = rundir.read_status(sweep_dir(work) / CELLS[(GOOD, 2)])
    assert (status.state, status.cause) == ("killed", "stopped by SIGINT (Ctrl-C)")
    assert state(work, (BROKEN, 2)) is None  # never started
    assert state(work, (GOOD, 3)) == state(work, (BROKEN, 3)) == "refused"  # recorded before any run
    assert "1 more cell(s) not run. Run the same command again to run the unfinished cells." in printed


def test_the_same_command_runs_the_unfinished_cells_one_failing_with_its_cause(work, resumed):
    code, seconds, out, summary = resumed
    print(f"sweep of 2 runs: {seconds:.0f} s")
    assert code == 1
    assert [state(work, cell) for cell in CELLS] == ["completed", "refused", "failed", "refused"]
    previous = sorted(p.name for p in (sweep_dir(work) / ".previous").iterdir())
    assert len(previous) == 1 and previous[0].startswith(f"{CELLS[(GOOD, 2)]}.killed-")
    rows = {row["name"]: row for row in summary["runs"]}
    assert [row["name"] for row in summary["runs"]] == list(CELLS.values())  # cell order
    assert rows[CELLS[(GOOD, 2)]]["sweep"] == {"data.path": GOOD, "train.micro_batch_size": 2}
    assert rows[CELLS[(GOOD, 2)]]["iterations_done"] == 2 and rows[CELLS[(GOOD, 2)]]["tokens_per_s_per_gpu"]
    failed = rows[CELLS[(BROKEN, 2)]]
    assert failed["status"] == "failed" and "IndexError" in failed["cause"], failed["cause"]
    refused = rows[CELLS[(GOOD, 3)]]
    assert refused["status"] == "refused"
    assert refused["cause"] == "global batch 8 is not a multiple of micro batch 3 x data parallel 2 = 6"
    assert f"{CELLS[(GOOD, 3)]}  refused: global batch 8 is not a multiple" in out
    assert f"{CELLS[(BROKEN, 2)]}  failed" in out and "IndexError" in out
    assert "zerolab sweep tiny: 1 completed, 2 refused, 1 failed" in out
    header = (sweep_dir(work) / "summary.md").read_text().splitlines()[0]
    assert header.startswith("| run | data.path | train.micro_batch_size |")


def test_checkpoints_every_given_fraction_of_an_epoch(work, resumed):
    run_dir = sweep_dir(work) / CELLS[(GOOD, 2)]
    recipe = load_recipe(run_dir / rundir.RECIPE_FILE)
    with inside(work):
        assert save_interval(recipe) == 1
    saved = sorted(p.name for p in (run_dir / rundir.CHECKPOINTS_DIR).iterdir() if p.is_dir())
    assert saved == ["global_step1", "global_step2"]  # DeepSpeed's names
    # the loop saved iteration 2, its last: pretrain() does not write it again (final_checkpoint_saved_once)
    log = (run_dir / rundir.LOG_FILE).read_text()
    assert len(re.findall(r"saving checkpoint at iteration +2 to", log)) == 1, log[-3000:]
    assert "the checkpoint of iteration 2 is saved already; not saving it again" in log


def test_the_plots_draw_completed_cells_only(work, resumed):
    written = {p.name for p in sweep_dir(work).glob("sweep-*.png")}
    assert written == {"sweep-data.path.png", "sweep-train.micro_batch_size.png"}
    collection = summarize_paths([sweep_dir(work)], Options())
    (sweep,) = collection.sweeps
    plan = sweep.plan
    assert axis(plan, "train.micro_batch_size") == ([2, 3], [2.0, 3.0], "linear")
    assert axis(plan, "data.path") == ([GOOD, BROKEN], [0.0, 1.0], "categorical")
    xs = {value_text(value): x for value, x in zip(*axis(plan, "data.path")[:2], strict=True)}
    failed = next(s for s in collection.runs if s.row["status"] == "failed")
    assert failed.row["max_allocated_GiB"] is None  # it crashed before its first iteration: no figures
    for metric in ("tokens_per_s_per_gpu", "max_allocated_GiB", "peak_host_GiB", "last_loss"):
        assert [point.x for point in points(metric, "data.path", xs, collection.runs)] == [0.0]


def test_running_it_again_runs_nothing(work, again):
    code, out, before, after = again
    assert code == 1 and before == after  # the failed cell still failed: not retried
    assert "0 to run, 2 refused, 2 skipped" in out
    assert f"{CELLS[(BROKEN, 2)]}  skipped: failed earlier; --retry-failed runs it again" in out
    assert "launching" not in out


def test_retry_failed_runs_only_the_failed_cell(work, retried):
    code, seconds, out, before, after = retried
    print(f"--retry-failed, one run: {seconds:.0f} s")
    assert code == 0
    assert after[CELLS[(GOOD, 2)]] == before[CELLS[(GOOD, 2)]]  # completed: untouched
    assert [state(work, cell) for cell in CELLS] == ["completed", "refused", "completed", "refused"]
    previous = sorted(p.name for p in (sweep_dir(work) / ".previous").iterdir())
    assert len(previous) == 2 and previous[0].startswith(f"{CELLS[(BROKEN, 2)]}.failed-")
    assert "1 to run, 2 refused, 1 skipped" in out


def test_the_demo_scores_checkpoints_holding_the_same_weights_once(work, retried):
    """After --retry-failed the broken cell trained on the fixed (identical) data: the same weights
    as the good cell, so the demo's scoring scores the model once and gives both its scores."""
    directory = sweep_dir(work)
    out = io.StringIO()
    with inside(work):  # the runs' data paths are relative to where they were launched
        evaluate_cells(directory, Console(file=out, width=200))
    good, fixed = (rundir.read_eval(directory / CELLS[cell])[0] for cell in ((GOOD, 2), (BROKEN, 2)))
    assert good is not None and fixed is not None, out.getvalue()
    assert set(good.tasks) == set(fixed.tasks) == {"val", "wikitext", "hellaswag"}
    for task, score in fixed.tasks.items():
        assert score.same_weights_as == CELLS[(GOOD, 2)] and score.weights_difference == 0.0
        assert score.metrics == good.tasks[task].metrics and good.tasks[task].same_weights_as is None
    assert f"{CELLS[(BROKEN, 2)]}  the same weights as {CELLS[(GOOD, 2)]}" in out.getvalue()
    assert out.getvalue().count("val ppl") == 1  # scored once
    collection = summarize_paths([directory], Options())
    rows = {run.row["name"]: run.row for run in collection.runs}
    assert f"eval scores: those of {CELLS[(GOOD, 2)]}" in " ".join(rows[CELLS[(BROKEN, 2)]]["notes"])
    said = (
        f"- {CELLS[(BROKEN, 2)]}: eval scores: those of {CELLS[(GOOD, 2)]}, whose checkpoint holds the same"
    )
    assert said in to_markdown(collection)  # summary.md says so
