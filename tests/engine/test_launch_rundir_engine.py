"""Run directories on the real engine: a second one-node run takes a free port and records it, a sweep
cell refused at its launch is recorded and the sweep goes on, and a failed export of the model to
fine-tune leaves no run directory. Without the engine: tests/unit/test_launch_rundir.py."""

from __future__ import annotations

import json
import re
from pathlib import Path

from finetune_runs import GLUE_SAMPLES
from launch_helpers import DEFAULT_PORT, default_port_in_use

from zerolab.backends.local import free_port
from zerolab.cli import main
from zerolab.locations import REPO_ROOT
from zerolab.recipe.compose import load_recipe
from zerolab.recipe.output import resolved_yaml
from zerolab.recipe.yaml_io import read_yaml_mapping
from zerolab.rundir import Status, read_status, write_status


def unexportable_run(directory: Path) -> Path:
    """A run directory of zerolab launch whose checkpoint the export refuses: ZeRO-3 at tensor
    parallel 2."""
    (directory / "checkpoints" / "global_step3").mkdir(parents=True)
    (directory / "checkpoints" / "latest_checkpointed_iteration.txt").write_text("3")
    (directory / "run.json").write_text(json.dumps({"name": directory.name}))
    (directory / "recipe.yaml").write_text(resolved_yaml(load_recipe("cpu/tiny_z3", ["parallel.tensor=2"])))
    return directory


NOT_EXPORTED = "a ZeRO-3 checkpoint at tensor parallel 2 is not exported"


def test_a_failed_export_of_the_model_to_fine_tune_leaves_no_run_directory(
    engine, tmp_path, capsys, monkeypatch
):
    # a run directory given as finetune.model is exported into the new run directory at launch (the
    # engine fixture: the export needs the engine's torch); when the export refuses it, no rank
    # starts and nothing is left
    monkeypatch.chdir(tmp_path)
    source = unexportable_run(tmp_path / "pretrained")
    words = ["finetune/cpu/tiny_wnli_z1", f"finetune.model={source}", f"finetune.data={GLUE_SAMPLES}"]
    assert main(["launch", *words]) == 2
    err = capsys.readouterr().err
    assert NOT_EXPORTED in err and "Traceback" not in err
    assert not (tmp_path / "logs").exists()


def test_a_sweep_cell_refused_at_its_launch_is_recorded_and_the_sweep_goes_on(
    engine, tmp_path, capsys, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    source = unexportable_run(tmp_path / "pretrained")
    words = ["finetune/cpu/tiny_wnli_z1", f"finetune.model={source}", f"finetune.data={GLUE_SAMPLES}"]
    assert main(["sweep", *words, "train.seed=1,2", "--name", "s"]) == 2  # every cell refused
    out = capsys.readouterr().out
    assert out.count("refused") >= 2 and "Traceback" not in out
    for cell in ("train.seed-1", "train.seed-2"):
        run_dir = tmp_path / "logs" / "sweeps" / "s" / cell
        assert [path.name for path in run_dir.iterdir()] == ["status.json"]  # nothing half-written
        status, _ = read_status(run_dir)
        assert status.state == "refused" and NOT_EXPORTED in status.cause


DATA = str(REPO_ROOT / "tests" / "fixtures" / "recipe-data" / "dolly151_text_document")


def master_port(command: str) -> int:
    """The rendezvous port of a command.sh (torchrun's --master-port, deepspeed's --master_port)."""
    return int(re.search(r"--master[-_]port (\d+)", command).group(1))


def test_a_second_one_node_run_takes_a_free_port_and_records_it(engine, tmp_path, capsys, monkeypatch):
    # the engine fixture: the launch finds its launcher; no rank starts (the training is stood in for)
    monkeypatch.chdir(tmp_path)
    started: list[list[str]] = []

    def training(run_dir, argv, env, cwd, **_):
        started.append(argv)
        return run_dir

    def finished(run_dir):
        return write_status(run_dir, Status(state="completed", exit_code=0))

    monkeypatch.setattr("zerolab.backends.local.start", training)
    monkeypatch.setattr("zerolab.backends.local.finish", finished)
    with default_port_in_use():
        for launcher in ("torchrun", "deepspeed"):
            run_dir = tmp_path / launcher
            words = ["cpu/tiny_z1", f"data.path={DATA}", f"hardware.launcher={launcher}"]
            assert main(["launch", *words, "--run-dir", str(run_dir)]) == 0
            assert "is in use" not in capsys.readouterr().err
            port = master_port((run_dir / "command.sh").read_text())
            assert port != DEFAULT_PORT and port == master_port(" ".join(started[-1]))
            assert json.loads((run_dir / "run.json").read_text())["master_port"] == port
            # the recipe keeps the port unset: a resume of the run takes a free one again
            assert read_yaml_mapping(run_dir / "recipe.yaml")["hardware"]["master_port"] is None
        # a port the user sets is kept, and checked
        free = free_port()
        run_dir = tmp_path / "set"
        assert (
            main(
                [
                    "launch",
                    "cpu/tiny_z1",
                    f"data.path={DATA}",
                    f"hardware.master_port={free}",
                    "--run-dir",
                    str(run_dir),
                ]
            )
            == 0
        )
        assert master_port((run_dir / "command.sh").read_text()) == free
        assert json.loads((run_dir / "run.json").read_text())["master_port"] == free
        assert (
            main(["launch", "cpu/tiny_z1", f"data.path={DATA}", f"hardware.master_port={DEFAULT_PORT}"]) == 2
        )
        assert f"hardware.master_port {DEFAULT_PORT} is in use on this machine" in capsys.readouterr().err
    # several nodes keep needing one agreed port: the default, as before
    capsys.readouterr()
    assert main(["render", "gpt2_z1", "hardware.nodes=2", "hardware.master_addr=node0"]) == 0
    assert "--master-port 29500" in capsys.readouterr().out
