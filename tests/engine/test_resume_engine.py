"""Resuming under another setup on the real engine (the tiny GPT-2 on CPU): a run saved at
iteration 2 of 4 (Megatron's --exit-interval stops it there, its schedule that of 4 iterations)
continued under another setup gives, at iterations 3 and 4, the losses and learning rates of the
run that was never interrupted (fp32, 1e-4), its checkpoint converted once to DeepSpeed's universal
format beside the original and reused; a checkpoint the conversion cannot read is refused, with
nothing left behind; two conversions of one checkpoint at once convert it once, and Ctrl-C leaves
no conversion; a sweep continues one run under each setup and says where its cells started.
About 7 tiny launches."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
from engine_runs import SEQ_LENGTH

from zerolab import rundir
from zerolab.cli import main
from zerolab.contracts import LATEST_UNIVERSAL, UNIVERSAL_CHECKPOINT_MODULE, universal_folder
from zerolab.engine.paths import engine_python_env, zerolab_on_path

ITERS = ["train.iters=4", "train.lr_warmup_iters=1", "train.log_interval=1", f"model.seq_length={SEQ_LENGTH}"]
STOP_AT_2 = ["train.save_interval=2", "train.exit_interval=2"]
_ITERATION = re.compile(r"iteration\s+(\d+)/\s*\d+ \|.*?learning rate: ([0-9.E+-]+).*?lm loss: ([0-9.E+-]+)")


def trained(run_dir: Path) -> dict[int, tuple[float, float]]:
    """Iteration -> (learning rate, loss), as train.log states them."""
    text = (run_dir / rundir.LOG_FILE).read_text(errors="replace")
    return {int(m[1]): (float(m[2]), float(m[3])) for m in _ITERATION.finditer(text)}


def launch(*words: str, run_dir: Path) -> Path:
    assert main(["launch", *words, "--run-dir", str(run_dir)]) == 0, (run_dir / rundir.LOG_FILE).read_text()[
        -3000:
    ]
    assert json.loads((run_dir / rundir.STATUS_FILE).read_text())["state"] == "completed"
    return run_dir


@pytest.fixture(scope="module")
def runs(engine, dataset, tmp_path_factory):
    """`runs(recipe)`: (saved at 2, uninterrupted to 4) runs of a CPU recipe, made once (the second
    None with `uninterrupted=False`)."""
    made: dict[str, tuple[Path, Path]] = {}
    root = tmp_path_factory.mktemp("resume")

    def get(recipe: str, *, uninterrupted: bool = True) -> tuple[Path, Path | None]:
        if recipe not in made:
            data = f"data.path={dataset}"
            name = recipe.replace("/", "_")
            saved = launch(recipe, data, *ITERS, *STOP_AT_2, run_dir=root / f"{name}-saved")
            whole = launch(recipe, data, *ITERS, run_dir=root / f"{name}-whole") if uninterrupted else None
            made[recipe] = saved, whole
        return made[recipe]

    return get


def assert_continues(continued: Path, whole: Path, iterations: tuple[int, ...]) -> None:
    ran, reference = trained(continued), trained(whole)
    assert sorted(ran) == [3, 4]  # the iteration count carried over: it starts at 3
    for iteration in iterations:
        (lr, loss), (lr_whole, loss_whole) = ran[iteration], reference[iteration]
        assert lr == lr_whole, (iteration, lr, lr_whole)  # the schedule carried over
        assert abs(loss - loss_whole) <= 1e-4, (iteration, loss, loss_whole)


def test_zero3_continues_with_its_optimizer_offloaded_on_one_rank(runs, tmp_path):
    saved, _ = runs("cpu/tiny_z3", uninterrupted=False)
    _, whole = runs(
        "cpu/tiny_z1"
    )  # ZeRO's stages train to the same losses (tests/engine/test_engine_matrix.py)
    argv = ["--resume", str(saved), "zero=z3_offload", "hardware.procs_per_node=1"]
    continued = launch(*argv, run_dir=tmp_path / "offload")
    assert_continues(continued, whole, (3,))  # the next ones leave it by ~7e-4: docs/resume.md
    log = (continued / rundir.LOG_FILE).read_text()
    # each parameter group keeps its own weight decay (DeepSpeed gives all the first group's)
    assert "zero3_universal_group_settings: weight decay by group [0.1, 0.0]" in log


def test_a_checkpoint_the_conversion_cannot_read_is_refused_leaving_nothing(runs, tmp_path, capsys):
    saved, _ = runs("cpu/tiny_z1")
    damaged = tmp_path / "damaged"
    shutil.copytree(saved, damaged, ignore=shutil.ignore_patterns("*_universal", LATEST_UNIVERSAL))
    step = damaged / rundir.CHECKPOINTS_DIR / "global_step2"
    for optimizer_file in step.glob("*optim_states.pt"):
        optimizer_file.write_bytes(b"not a checkpoint")
    run_dir = tmp_path / "continued"
    capsys.readouterr()
    argv = ["launch", "--resume", str(damaged), "hardware.procs_per_node=1", "--run-dir", str(run_dir)]
    assert main(argv) == 2
    error = capsys.readouterr().err
    assert f"{damaged / 'checkpoints'}: the checkpoint at iteration 2 cannot be converted" in error
    assert not run_dir.exists()
    assert sorted(p.name for p in step.parent.iterdir()) == [
        "global_step2",
        "latest",
        "latest_checkpointed_iteration.txt",
        "zero_to_fp32.py",
    ]  # no half-converted folder


def test_a_sweep_continues_one_run_under_each_setup_reusing_the_conversion(
    runs, tmp_path, monkeypatch, capsys
):
    saved, whole = runs("cpu/tiny_z1")
    monkeypatch.setattr("zerolab.sweep.run.sweep_dir", lambda name: tmp_path / "sweeps" / name)
    argv = ["sweep", "--resume", str(saved), "zero=z1,z2,z3", "hardware.procs_per_node=1"]
    assert main([*argv, "--name", "study"]) == 0
    assert "between ZeRO 1-2 and ZeRO-3" in capsys.readouterr().out  # z3 refused, with the reason
    study = tmp_path / "sweeps" / "study"
    checkpoints = saved / rundir.CHECKPOINTS_DIR
    assert (checkpoints / universal_folder(2) / "zero").is_dir()  # beside the original
    assert (checkpoints / LATEST_UNIVERSAL).read_text() == universal_folder(2)
    # converted once, by the z1 cell's first step, then reused by the z2 cell
    command = (study / "zero-z1" / rundir.COMMAND_FILE).read_text()
    assert "python -m zerolab.rank.universal_checkpoint " in command and "--universal-checkpoint" in command
    converted = checkpoints / universal_folder(2)
    assert converted.stat().st_mtime < (study / "zero-z2" / rundir.COMMAND_FILE).stat().st_mtime
    assert_continues(study / "zero-z1", whole, (3, 4))  # ZeRO-1 on 2 ranks -> on 1
    assert_continues(study / "zero-z2", whole, (3, 4))  # ZeRO-1 on 2 ranks -> ZeRO-2 on 1
    facts = json.loads((study / "zero-z1" / rundir.RUN_FILE).read_text())
    assert facts["resumed_from"] == str(saved.resolve()) and facts["resumed_iteration"] == 2
    assert (facts["resumed_setup"], facts["zero_stage"], facts["data_parallel"]) == ("z1 dp2 tp1 pp1", 1, 1)
    table = (study / "summary.md").read_text()
    assert "resumed from" in table and table.count(f"{saved.name}@2") == 2


def conversion(engine: tuple[Path, Path], checkpoints: Path) -> subprocess.Popen:
    """The launch's first step under another setup (`python -m zerolab.rank.universal_checkpoint`),
    started as a terminal's foreground job."""
    engine_dir, python = engine
    return subprocess.Popen(
        [str(python), "-m", UNIVERSAL_CHECKPOINT_MODULE, str(engine_dir), str(checkpoints), "2"],
        env=engine_python_env() | zerolab_on_path(engine_dir),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip


def held(lock: Path, by: subprocess.Popen) -> None:
    """Wait until `by` holds `lock` (its pid written in it)."""
    deadline = time.monotonic() + 60
    while not (lock.is_file() and lock.read_text().startswith(f"pid {by.pid}:")):
        assert by.poll() is None and time.monotonic() < deadline, by.communicate()
        time.sleep(0.02)


def test_two_conversions_at_once_convert_once_and_ctrl_c_leaves_no_conversion(runs, engine, tmp_path):
    # two launches continuing one checkpoint under other setups (two terminals, a sweep's SLURM
    # array tasks) both wrote into the same .partial folder; Ctrl-C printed a traceback
    saved, _ = runs("cpu/tiny_z1", uninterrupted=False)
    copy = tmp_path / "saved"
    shutil.copytree(saved, copy, ignore=shutil.ignore_patterns("*_universal*", LATEST_UNIVERSAL))
    checkpoints = copy / rundir.CHECKPOINTS_DIR
    before = sorted(p.name for p in checkpoints.iterdir())
    lock = checkpoints / f"{universal_folder(2)}.lock"

    stopped = conversion(engine, checkpoints)
    held(lock, stopped)
    os.killpg(stopped.pid, signal.SIGINT)  # Ctrl-C as it converts
    _, err = stopped.communicate(timeout=120)
    assert stopped.returncode == 130 and "Traceback" not in err
    assert err.strip().splitlines()[-1] == (
        f"zerolab launch: interrupted (Ctrl-C): {checkpoints} holds no conversion of it (the next launch "
        "converts it)"
    )
    assert sorted(p.name for p in checkpoints.iterdir()) == before  # no partial folder, no lock

    first = conversion(engine, checkpoints)
    held(lock, first)
    second = conversion(engine, checkpoints)
    said_first, _ = first.communicate(timeout=300)
    said_second, _ = second.communicate(timeout=300)
    assert first.returncode == second.returncode == 0
    step = checkpoints / "global_step2"
    assert f"converted {step}" in said_first
    assert f"zerolab: waiting for pid {first.pid}: the conversion of {step}" in said_second
    assert "reusing" in said_second
    assert (checkpoints / LATEST_UNIVERSAL).read_text() == universal_folder(2)
    assert sorted(p.name for p in checkpoints.iterdir()) == sorted(
        [*before, universal_folder(2), LATEST_UNIVERSAL]
    )
