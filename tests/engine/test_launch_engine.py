"""`zerolab launch` on the real engine, on CPU with two ranks: a whole run (its run
directory, status and parsed metrics, the loss falling), ZeRO-3 with CPU offload (the
session's shared run, engine_runs.SHARED_RUNS), resuming from a checkpoint, a crash recorded
with its cause, and a rank killed by a signal. Skipped, with the reason, when the engine is not
set up (`make setup`). Each run is a tiny model for few iterations."""

from __future__ import annotations

import json
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from engine_runs import ITERATIONS
from launch_helpers import shm_buffers_left

from zerolab.backends.local import free_port
from zerolab.cli import main
from zerolab.locations import REPO_ROOT
from zerolab.recipe.output import read_render_text

RUN_FILES = {
    "recipe.yaml",
    "ds_config.json",
    "command.sh",
    "doctor.json",
    "run.json",
    "train.log",
    "samples.csv",
    "status.json",
}


@pytest.fixture(scope="module")
def z1_launch(engine, dataset, tmp_path_factory) -> tuple[list[str], Path]:
    """The arguments of tiny_z1 (micro-batch 2) for 20 iterations with a checkpoint every 10."""
    run_dir = tmp_path_factory.mktemp("runs") / "tiny_z1"
    words = [
        "cpu/tiny_z1",
        f"data.path={dataset}",
        "train.iters=20",
        "train.log_interval=5",
        "train.save_interval=10",
        f"hardware.master_port={free_port()}",
        "--run-dir",
        str(run_dir),
    ]
    return words, run_dir


@pytest.fixture(scope="module")
def z1_run(z1_launch) -> tuple[int, Path]:
    """tiny_z1 launched."""
    words, run_dir = z1_launch
    return main(["launch", *words]), run_dir


def test_command_sh_runs_what_the_dry_run_printed(z1_launch, z1_run, capsys):
    words, run_dir = z1_launch
    capsys.readouterr()
    assert main(["launch", *words, "--dry-run"]) == 0
    config, command = read_render_text(capsys.readouterr().out)
    script = (run_dir / "command.sh").read_text()
    assert script.endswith(command + "\n")
    assert (
        f"--deepspeed_config {run_dir}/ds_config.json" in script and f"--save {run_dir}/checkpoints" in script
    )
    assert config == json.loads((run_dir / "ds_config.json").read_text())


def status(run_dir: Path) -> dict:
    return json.loads((run_dir / "status.json").read_text())


def summary(run_dir: Path, tmp_path: Path) -> dict:
    assert main(["summarize", str(run_dir), "--out", str(tmp_path / "summary"), "--no-plots"]) == 0
    (run,) = json.loads((tmp_path / "summary" / "summary.json").read_text())["runs"]
    return run


def test_a_whole_run_on_cpu(z1_launch, z1_run, tmp_path):
    code, run_dir = z1_run
    assert code == 0
    assert {path.name for path in run_dir.iterdir()} >= RUN_FILES
    assert status(run_dir)["state"] == "completed" and status(run_dir)["exit_code"] == 0
    facts = json.loads((run_dir / "run.json").read_text())
    assert (facts["name"], facts["zero_stage"], facts["micro_batch_size"], facts["train_iters"]) == (
        "tiny_z1+train.iters=20+train.log_interval=5+train.save_interval=10",
        1,
        2,
        20,
    )
    log = (run_dir / "train.log").read_text()
    assert "zerolab: workaround contiguous_attention_inputs" in log  # micro-batch 2 needs it
    assert json.loads((run_dir / "ds_config.json").read_text())["zero_optimization"]["stage"] == 1
    assert str(run_dir / "ds_config.json") in (run_dir / "command.sh").read_text()
    assert json.loads((run_dir / "doctor.json").read_text())["engine"]["matches_pin"] is True
    assert "zerolab: workaround shm_buffers_unlinked" in log
    port = next(word.partition("=")[2] for word in z1_launch[0] if word.startswith("hardware.master_port="))
    assert not shm_buffers_left(port)  # no host memory left behind
    run = summary(run_dir, tmp_path)
    assert run["status"] == "completed"
    assert run["iterations_done"] == 20
    assert run["last_loss"] < run["first_loss"] - 0.3
    assert run["tokens_per_s_per_gpu"] > 0 and run["peak_host_GiB"] > 0.1


def test_resume_continues_from_the_last_checkpoint(z1_run, tmp_path):
    _, previous = z1_run
    assert (previous / "checkpoints" / "latest_checkpointed_iteration.txt").read_text().strip() == "20"
    run_dir = tmp_path / "resumed"
    port = f"hardware.master_port={free_port()}"
    assert main(["launch", "--resume", str(previous), "train.iters=26", port, "--run-dir", str(run_dir)]) == 0
    assert status(run_dir)["state"] == "completed"
    command = (run_dir / "command.sh").read_text()
    assert f"--load {previous / 'checkpoints'}" in command
    assert "--override-opt_param-scheduler" in command  # the schedule now ends at 26
    log = (run_dir / "train.log").read_text()
    assert "iteration       25/      26" in log
    assert "iteration        5/" not in log
    name = json.loads((run_dir / "run.json").read_text())["name"]
    assert name == "tiny_z1+train.log_interval=5+train.save_interval=10+train.iters=26"  # not iters=20


@pytest.mark.parametrize(
    ("overrides", "told"),
    [
        (["zero=z3"], "the setup changes between ZeRO 1-2 and ZeRO-3 (z1 dp2 tp1 pp1 -> z3 dp2 tp1 pp1)"),
        (
            ["parallel.tensor=2"],
            "the setup changes of the tensor-parallel size (z1 dp2 tp1 pp1 -> z1 dp1 tp2 pp1)",
        ),
        (["model.num_layers=3"], "model.num_layers: the checkpoint was saved with 2, the overrides give 3"),
        (["precision=bf16"], "precision: the checkpoint was saved with fp32, the overrides give bf16"),
        (
            [],
            "nothing left to train: the last checkpoint is at iteration 20 and the recipe trains to "
            "iteration 20",
        ),
        (["train.iters=16"], "give train.iters=N with N > 20"),
    ],
)
def test_a_resume_the_checkpoint_cannot_carry_is_refused_before_launch(
    z1_run, tmp_path, capsys, overrides, told
):
    _, previous = z1_run
    run_dir = tmp_path / "resumed"
    capsys.readouterr()
    assert main(["launch", "--resume", str(previous), *overrides, "--run-dir", str(run_dir)]) == 2
    error = capsys.readouterr().err
    assert told in error and f"--resume {previous}: cannot continue its checkpoint at iteration 20" in error
    if overrides and not overrides[0].startswith("train."):
        assert f"start a new run: zerolab launch {previous / 'recipe.yaml'} {overrides[0]}" in error
    assert not run_dir.exists()


def test_zero3_with_cpu_optimizer_offload(trained):
    run = trained("z3_offload")  # the session's shared run of cpu/tiny_z3_offload (engine_runs.py)
    assert status(run.run_dir)["state"] == "completed"
    assert f"iteration {ITERATIONS:8d}/{ITERATIONS:8d}" in run.text
    assert "DeepSpeedCPUAdam" in run.text


def test_a_crashing_rank_fails_the_launch_with_the_cause(engine, dataset, tmp_path):
    broken = tmp_path / "broken"
    shutil.copy(dataset + ".idx", str(broken) + ".idx")
    # whole by the launch's checks (index and size), but every token beyond GPT-2's vocabulary
    Path(str(broken) + ".bin").write_bytes(b"\xff" * Path(dataset + ".bin").stat().st_size)
    run_dir = tmp_path / "crash"
    code = main(
        [
            "launch",
            "cpu/tiny_dp",
            f"data.path={broken}",
            "train.iters=6",
            "train.lr_warmup_iters=1",
            f"hardware.master_port={free_port()}",
            "--run-dir",
            str(run_dir),
        ]
    )
    assert code != 0
    state = status(run_dir)
    assert state["state"] == "failed" and state["exit_code"] == code
    assert "IndexError" in state["cause"], state["cause"]


def rank_processes(launch: psutil.Process) -> dict[int, psutil.Process]:
    """The rank processes below a launch: RANK is in their environment and not in their parent's
    (their data-loader workers inherit it from them)."""
    ranks = {}
    for process in launch.children(recursive=True):
        try:
            rank, parent_rank = process.environ().get("RANK"), process.parent().environ().get("RANK")
        except psutil.Error:
            continue
        if rank is not None and parent_rank is None:
            ranks[int(rank)] = process
    return ranks


def test_a_rank_killed_by_sigsegv_is_reported_as_such(engine, dataset, tmp_path):
    run_dir = tmp_path / "segv"
    printed = tmp_path / "launch.out"
    argv = ["launch", "cpu/tiny_dp", f"data.path={dataset}", "train.iters=500", "train.log_interval=1"]
    argv.append(f"hardware.master_port={free_port()}")
    with printed.open("w") as out:
        launch = subprocess.Popen(
            [sys.executable, "-m", "zerolab", *argv, "--run-dir", str(run_dir)],
            cwd=REPO_ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        log = run_dir / "train.log"
        deadline = time.monotonic() + 300
        while not (log.is_file() and re.search(r"^ iteration +2/", log.read_text(), re.MULTILINE)):
            assert launch.poll() is None, printed.read_text()[-3000:]
            assert time.monotonic() < deadline, "training never started"
            time.sleep(0.2)
        ranks = rank_processes(psutil.Process(launch.pid))
        assert sorted(ranks) == [0, 1]
        ranks[0].send_signal(signal.SIGSEGV)
        assert launch.wait(timeout=120) == 1  # torchrun's exit code
    cause = "rank 0 killed by SIGSEGV (signal 11)"
    state = status(run_dir)
    assert (state["state"], state["exit_code"], state["cause"]) == ("failed", 1, cause)
    assert state["last_lines"] and re.match(r" iteration +\d+/ +500 \|", state["last_lines"][-1])
    text = printed.read_text()
    name = "tiny_dp+train.iters=500+train.log_interval=1"  # the run's name carries its overrides
    assert f"zerolab: {name} failed in " in text and f"(exit code 1): {cause}; run directory" in text
    assert "zerolab: the last lines before it:\n" in text and f"  {state['last_lines'][-1]}\n" in text
    row = summary(run_dir, tmp_path)
    assert (row["status"], row["cause_kind"], row["cause"]) == ("failed", "signal", cause)


def test_a_run_started_while_another_holds_the_default_port_trains(trained):
    # no hardware.master_port given, 29500 held (engine_runs.train: every shared run starts so): the
    # one-node launch takes a free port (as torchrun --standalone does) where it once met the other
    # run's 29500 and was refused
    run_dir = trained("z0").run_dir
    assert status(run_dir)["state"] == "completed"
    port = json.loads((run_dir / "run.json").read_text())["master_port"]
    assert port != 29500 and f"--master-port {port} " in (run_dir / "command.sh").read_text()
