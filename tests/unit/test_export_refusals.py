"""What `zerolab export` refuses before reading any weights: a folder that is not a run directory, a run
without a checkpoint (naming the key that saves one), an iteration not saved, an output folder in
use, a ZeRO-3 checkpoint split across tensor-parallel ranks. The exports themselves, on the real
engine: tests/engine/test_export_engine.py."""

from __future__ import annotations

from pathlib import Path

from zerolab.cli import main
from zerolab.rundir import RECIPE_END


def test_a_run_without_a_checkpoint_is_refused_with_the_key_that_saves_one(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    (run / "run.json").write_text('{"name": "tiny"}')
    (run / "recipe.yaml").write_text(f"base: [model/gpt2-tiny]\n{RECIPE_END}\n")
    assert main(["export", str(run), "--out", str(tmp_path / "hf")]) == 2
    said = capsys.readouterr().err
    assert "no checkpoint" in said and "train.save_interval" in said
    assert not (tmp_path / "hf").exists()


def test_a_folder_that_is_not_a_run_directory_is_named(tmp_path, capsys):
    assert main(["export", str(tmp_path), "--out", str(tmp_path / "hf")]) == 2
    assert "not a run directory written by zerolab launch" in capsys.readouterr().err


def test_an_iteration_not_saved_and_an_output_folder_in_use_are_refused(tmp_path, capsys):
    run = tmp_path / "run"
    (run / "checkpoints" / "global_step4").mkdir(parents=True)
    (run / "run.json").write_text('{"name": "tiny"}')
    (run / "recipe.yaml").write_text(f"base: [model/gpt2-tiny]\n{RECIPE_END}\n")
    assert main(["export", str(run), "--iteration", "3", "--out", str(tmp_path / "hf")]) == 2
    assert "holds checkpoints at iterations 4; give one of those" in capsys.readouterr().err
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "model.safetensors").write_text("someone's")
    assert main(["export", str(run), "--out", str(taken)]) == 2
    assert "already exists and is not an empty folder" in capsys.readouterr().err
    assert (taken / "model.safetensors").read_text() == "someone's"


def test_a_zero3_checkpoint_split_across_tensor_parallel_ranks_is_refused(tmp_path, capsys):
    run = tmp_path / "run"
    (run / "checkpoints" / "global_step4").mkdir(parents=True)
    (run / "run.json").write_text('{"name": "tiny_z3"}')
    recipe = (Path(__file__).resolve().parents[2] / "recipes" / "cpu" / "tiny_z3.yaml").read_text()
    (run / "recipe.yaml").write_text(f"{recipe}parallel:\n  tensor: 2\n{RECIPE_END}\n")
    assert main(["export", str(run), "--out", str(tmp_path / "hf")]) == 2
    said = capsys.readouterr().err
    assert "tensor parallel 2 is not exported" in said and "parallel.tensor=1" in said
    assert not (tmp_path / "hf").exists()
