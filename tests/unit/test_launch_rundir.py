"""Run directories: one per launch, named by the time, never reused or overwritten."""

from __future__ import annotations

import json
import re
import shutil
import socket
from pathlib import Path

import pytest
from finetune_runs import GLUE_SAMPLES

from zerolab.backends.local import FREE_PORTS, ephemeral_ports, free_port, port_taken, with_free_port
from zerolab.cli import main
from zerolab.engine.cuda import query_gpus
from zerolab.errors import UserError
from zerolab.launch.plan import plan
from zerolab.locations import REPO_ROOT, SAMPLES_DIR
from zerolab.recipe.compose import load_recipe
from zerolab.rundir import claim, new_path, read_status, write_refusal


def test_each_launch_gets_a_new_directory_even_within_one_second(tmp_path):
    first = claim(new_path(tmp_path / "tiny_z1"))
    (first / "train.log").write_text("first run\n")
    second = claim(new_path(tmp_path / "tiny_z1"))
    assert first != second
    assert first.parent == second.parent == tmp_path / "tiny_z1"
    assert all(re.fullmatch(r"\d{8}-\d{6}", d.name) for d in (first, second))
    assert (first / "train.log").read_text() == "first run\n"


def test_a_given_run_directory_that_exists_is_refused(tmp_path):
    existing = tmp_path / "run"
    existing.mkdir()
    (existing / "status.json").write_text("{}")
    with pytest.raises(UserError, match="never overwritten"):
        claim(existing)
    assert (existing / "status.json").read_text() == "{}"
    assert claim(tmp_path / "new" / "run").is_dir()


def test_a_run_directory_under_a_file_is_refused_naming_the_file(tmp_path, capsys):
    (tmp_path / "notes.txt").write_text("mine")
    run_dir = tmp_path / "notes.txt" / "sub" / "run"
    with pytest.raises(UserError, match=r"notes.txt is a file, so no folder can be made there"):
        claim(run_dir)
    assert (tmp_path / "notes.txt").read_text() == "mine"


def test_dry_run_prints_the_render_and_writes_nothing(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["launch", "cpu/tiny_z3", "--dry-run", "--run-dir", str(tmp_path / "run")]) == 0
    out = capsys.readouterr().out
    assert "-m zerolab.rank.megatron_entry" in out and '"stage": 3' in out
    assert list(tmp_path.iterdir()) == []


def test_launch_without_a_recipe_is_a_usage_error(capsys):
    assert main(["launch"]) == 2
    assert "give a RECIPE" in capsys.readouterr().err


def test_a_refused_run_is_a_summary_row_with_the_checks_message(tmp_path):
    cell = claim(tmp_path / "sweep" / "train.micro_batch_size-3")
    message = "recipe.yaml: 1 problem(s) found before launch:\n- global batch 8 is not a multiple of 6\n"
    status = write_refusal(cell, message)
    assert read_status(cell) == (status, [])
    assert status.state == "refused" and status.cause == (
        "recipe.yaml: 1 problem(s) found before launch: - global batch 8 is not a multiple of 6"
    )
    assert main(["summarize", str(tmp_path / "sweep"), "--out", str(tmp_path / "out"), "--no-plots"]) == 0
    (row,) = json.loads((tmp_path / "out" / "summary.json").read_text())["runs"]
    assert (row["name"], row["status"], row["cause"]) == ("train.micro_batch_size-3", "refused", status.cause)
    assert row["tokens_per_s_per_gpu"] is None and row["iterations_done"] is None
    assert "| refused: recipe.yaml: 1 problem(s)" in (tmp_path / "out" / "summary.md").read_text()


def test_a_cuda_recipe_launched_on_a_machine_without_a_gpu_is_refused_before_any_rank(
    tmp_path, capsys, monkeypatch
):

    if query_gpus():
        pytest.skip("nvidia-smi sees a GPU here: this machine can launch a CUDA recipe")
    monkeypatch.chdir(tmp_path)
    assert (
        main(
            [
                "prep",
                "dolly",
                "--input",
                str(SAMPLES_DIR / "dolly151.jsonl"),
                "--out",
                "data/dolly",
                "--quiet",
            ]
        )
        == 0
    )
    capsys.readouterr()
    assert main(["launch", "gpt2_z1", "train.iters=20"]) == 2
    err = capsys.readouterr().err
    assert "nvidia-smi sees no GPU on this machine" in err and "zerolab launch cpu/tiny_z1" in err
    assert not (tmp_path / "logs").exists()
    # Writing a job for GPU nodes elsewhere, and rendering, are no launch here.
    assert main(["render", "gpt2_z1", "--slurm"]) == 0
    assert main(["launch", "gpt2_z1", "--dry-run"]) == 0


def test_a_dolly_recipe_refuses_the_demo_sample_prepared_where_dolly_15k_belongs(
    tmp_path, capsys, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    sample = str(SAMPLES_DIR / "dolly151.jsonl")
    assert main(["prep", "dolly", "--input", sample, "--out", "data/dolly", "--quiet"]) == 0
    capsys.readouterr()
    on_cpu = ["hardware=cpu-2ranks", "precision=fp32", "model=gpt2-tiny", "train.iters=20"]
    assert main(["launch", "gpt2_z1", *on_cpu]) == 2
    err = capsys.readouterr().err
    assert (
        "data.path: data/dolly_text_document holds 151 documents, fewer than data.min_documents (15,000)"
        in err
    )
    assert f"`zerolab prep dolly` from {sample}" in err
    assert "Prepare it with `zerolab prep dolly --out data/dolly --force`" in err
    assert not (tmp_path / "logs").exists()
    assert main(["render", "gpt2_z1"]) == 0  # render shows the launch, and warns
    assert "holds 151 documents" in capsys.readouterr().err

    assert plan(["gpt2_z1", *on_cpu, "data.min_documents=null"], engine_required=False)


def gpt2_folder(folder: Path) -> Path:
    """A Hugging Face GPT-2 folder as far as the checks before launch read it (config.json, the
    tokenizer files, a weights file)."""
    folder.mkdir(parents=True)
    shape = {"model_type": "gpt2", "n_layer": 2, "n_embd": 64, "n_head": 4, "n_positions": 128}
    (folder / "config.json").write_text(json.dumps(shape | {"vocab_size": 50257}))
    for name in ("vocab.json", "merges.txt"):
        shutil.copy(REPO_ROOT / "zerolab" / "assets" / "gpt2" / name, folder / name)
    (folder / "model.safetensors").write_bytes(b"")
    return folder


@pytest.mark.parametrize(
    ("train_rows", "overrides", "told"),
    [
        (0, [], "wnli_train.jsonl holds 0 examples, not one global batch"),
        (64, ["train.global_batch_size=1000"], "wnli_train.jsonl holds 64 examples, not one global batch"),
    ],
    ids=["an empty training split", "a global batch larger than the split"],
)
def test_a_fine_tuning_refused_for_its_data_leaves_no_run_directory(
    train_rows, overrides, told, tmp_path, capsys, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    model = gpt2_folder(tmp_path / "model")
    data = tmp_path / "glue"
    data.mkdir()
    rows = (GLUE_SAMPLES / "wnli_train.jsonl").read_text().splitlines(keepends=True)[:train_rows]
    (data / "wnli_train.jsonl").write_text("".join(rows))
    shutil.copy(GLUE_SAMPLES / "wnli_validation.jsonl", data)
    words = ["finetune/cpu/tiny_wnli_z1", f"finetune.model={model}", f"finetune.data={data}", *overrides]
    for where in ([], ["--run-dir", str(tmp_path / "runs" / "chosen")]):
        assert main(["launch", *words, *where]) == 2
        captured = capsys.readouterr()
        assert told in captured.err and "lower the batch size" in captured.err
        assert "Traceback" not in captured.err
        assert not (tmp_path / "logs").exists() and not (tmp_path / "runs").exists()
    # a sweep's checks refuse that cell before anything runs, as the launch does
    assert main(["sweep", *words, "train.seed=1,2", "--dry-run"]) == 2
    out = capsys.readouterr().out
    assert out.count("refused: train.global_batch_size=") == 2 and told in out
    assert sorted(path.name for path in tmp_path.iterdir()) == ["glue", "model"]


def test_render_says_a_one_node_launch_takes_a_free_port(capsys):
    assert main(["render", "cpu/tiny_z1"]) == 0
    out = capsys.readouterr().out
    assert "--master-port 29500" in out  # what the pasted text runs
    assert "hardware.master_port is not set: zerolab launch takes a free port" in out
    assert main(["render", "cpu/tiny_z1", "hardware.master_port=29600"]) == 0
    out = capsys.readouterr().out
    assert "--master-port 29600" in out and "takes a free port" not in out


def test_a_one_node_launch_takes_a_port_no_outgoing_connection_is_given(monkeypatch):
    # a port the kernel gives out (binding port 0) was taken by another run's gloo connection
    # between the choice and torchrun's listen: the launch failed with EADDRINUSE (CI, 2026-11-28)
    recipe = load_recipe("cpu/tiny_z1")
    ports = {with_free_port(recipe).hardware.master_port for _ in range(20)}
    assert len(ports) > 1 and not ports & set(ephemeral_ports())
    assert all(port in FREE_PORTS and port_taken(port) is None for port in ports)
    # a port something listens on is not taken
    with socket.socket() as other_run:
        held = free_port()
        other_run.bind(("", held))
        other_run.listen()
        monkeypatch.setattr("zerolab.backends.local.FREE_PORTS", range(held, held + 1))
        assert "in use" in port_taken(held)
        assert free_port() != held


def test_distillation_from_a_folder_without_a_checkpoint_is_refused_before_launch(
    tmp_path, capsys, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "teacher").mkdir()
    teacher = ["distillation.kd=true", "distillation.teacher=teacher", "distillation.teacher_num_layers=2"]
    teacher += ["distillation.teacher_hidden_size=64", "distillation.teacher_num_attention_heads=4"]
    assert main(["launch", "cpu/tiny_z1", *teacher]) == 2
    err = capsys.readouterr().err
    assert "distillation.teacher: teacher holds no checkpoint (latest_checkpointed_iteration.txt)" in err
    assert "point it at a trained run's checkpoints/ folder" in err
    assert not (tmp_path / "logs").exists()
