"""Run directories: one per launch, named by the time, never reused or overwritten."""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from zerolab.cli import main
from zerolab.engine.cuda import query_gpus
from zerolab.errors import UserError
from zerolab.launch.plan import plan
from zerolab.locations import REPO_ROOT, SAMPLES_DIR
from zerolab.recipe.compose import load_recipe
from zerolab.recipe.output import resolved_yaml
from zerolab.recipe.yaml_io import read_yaml_mapping
from zerolab.rundir import Status, claim, new_path, read_status, write_refusal, write_status


def test_each_launch_gets_a_new_directory_even_within_one_second(tmp_path):
    first = claim(new_path(tmp_path, "tiny_z1"))
    (first / "train.log").write_text("first run\n")
    second = claim(new_path(tmp_path, "tiny_z1"))
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


GLUE_SAMPLES = REPO_ROOT / "data_prep" / "samples" / "glue"


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
DEFAULT_PORT = 29500


@contextlib.contextmanager
def default_port_in_use() -> Iterator[None]:
    """Port 29500 listened on, as a run that trains holds it (left as it is when something holds it
    already)."""
    with socket.socket() as other_run:
        with contextlib.suppress(OSError):
            other_run.bind(("", DEFAULT_PORT))
            other_run.listen()
        yield


def master_port(command: str) -> int:
    """The rendezvous port of a command.sh (torchrun's --master-port, deepspeed's --master_port)."""
    return int(re.search(r"--master[-_]port (\d+)", command).group(1))


def test_a_second_one_node_run_takes_a_free_port_and_records_it(engine, tmp_path, capsys, monkeypatch):
    # the engine fixture: the launch finds its launcher; no rank starts (the training is stood in for)
    monkeypatch.chdir(tmp_path)
    started: list[list[str]] = []

    def training(run_dir, argv, env, cwd, **_):
        started.append(argv)
        return write_status(run_dir, Status(state="completed", exit_code=0))

    monkeypatch.setattr("zerolab.backends.local.execute", training)
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
        with socket.socket() as probe:
            probe.bind(("", 0))
            free = probe.getsockname()[1]
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


def test_render_says_a_one_node_launch_takes_a_free_port(capsys):
    assert main(["render", "cpu/tiny_z1"]) == 0
    out = capsys.readouterr().out
    assert "--master-port 29500" in out  # what the pasted text runs
    assert "hardware.master_port is not set: zerolab launch takes a free port" in out
    assert main(["render", "cpu/tiny_z1", "hardware.master_port=29600"]) == 0
    out = capsys.readouterr().out
    assert "--master-port 29600" in out and "takes a free port" not in out
