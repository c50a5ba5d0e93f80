"""`zerolab export` proven equal, not assumed: each way a checkpoint keeps its weights (ZeRO 3's
pieces, put together by DeepSpeed's consolidation; whole model files per tensor-parallel rank, at
tensor parallel 2 with ZeRO 1; pipeline parallel 2's layer files), exported and loaded by the
real transformers, gives the logits and loss of the engine's own forward pass of the same
checkpoint (the forward_probe launch patch) on held-out tokens. The tiny GPT-2 on CPU, 2 ranks
over gloo; skipped, with the reason, without the engine."""

from __future__ import annotations

import json
import os
import subprocess
import textwrap
from pathlib import Path

import numpy as np
import pytest
from launch_helpers import free_port

from zerolab.cli import main
from zerolab.engine.forward_probe import OUTPUT_FILE, PROBE_ENV, TOKENS_FILE

ITERATIONS = 2
LAYOUTS = {
    "z3": ("cpu/tiny_z3",),
    "tp2": ("cpu/tiny_z1", "parallel.tensor=2"),
    "pp2": ("cpu/tiny_z1", "parallel.pipeline=2"),
}

COMPARE = """
import json, sys, torch
from transformers import AutoTokenizer, GPT2LMHeadModel
exported, probe = sys.argv[1], sys.argv[2]
rows = torch.tensor(json.load(open(f"{probe}/tokens.json")))
engine = torch.load(f"{probe}/engine.pt")
model = GPT2LMHeadModel.from_pretrained(exported).eval()
with torch.no_grad():
    logits = model(rows[:, :-1]).logits
loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), rows[:, 1:].flatten())
tokenizer = AutoTokenizer.from_pretrained(exported)
print(json.dumps({
    "max_abs_logit_difference": (engine["logits"] - logits).abs().max().item(),
    "loss": loss.item(),
    "engine_loss": engine["loss"],
    "hello_world": tokenizer("hello world")["input_ids"],
    "activation": model.config.activation_function,
}))
"""


def _launch(*argv: str) -> None:
    assert main(["launch", *argv, f"hardware.master_port={free_port()}"]) == 0


@pytest.fixture(scope="module")
def held_out(dataset, tmp_path_factory) -> Path:
    """A probe folder with two rows of seq_length + 1 tokens from the end of the prepared sample."""
    tokens = np.fromfile(f"{dataset}.bin", dtype=np.uint16).astype(int)
    probe = tmp_path_factory.mktemp("probe")
    rows = [tokens[-400:-271].tolist(), tokens[-200:-71].tolist()]
    (probe / TOKENS_FILE).write_text(json.dumps(rows))
    return probe


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_an_export_gives_the_engines_own_logits(engine, dataset, held_out, tmp_path, monkeypatch, layout):
    run = tmp_path / "run"
    recipe, *overrides = LAYOUTS[layout]
    lengths = [f"train.iters={ITERATIONS}", f"train.save_interval={ITERATIONS}", "train.lr_warmup_iters=1"]
    _launch(recipe, f"data.path={dataset}", *overrides, *lengths, "--run-dir", str(run))
    assert main(["export", str(run), "--out", str(tmp_path / "hf")]) == 0
    assert sorted(p.name for p in (tmp_path / "hf").iterdir()) == [
        "config.json",
        "model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
    ]
    monkeypatch.setenv(PROBE_ENV, str(held_out))
    (held_out / OUTPUT_FILE).unlink(missing_ok=True)
    _launch("--resume", str(run), f"train.iters={ITERATIONS + 1}", "--run-dir", str(tmp_path / "probe"))
    assert "zerolab: patch forward_probe" in (tmp_path / "probe" / "train.log").read_text()
    _, python = engine
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", PROBE_ENV)}
    compared = subprocess.run(
        [str(python), "-c", textwrap.dedent(COMPARE), str(tmp_path / "hf"), str(held_out)],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    result = json.loads(compared.stdout.strip().splitlines()[-1])
    assert result["max_abs_logit_difference"] <= 1e-4, result
    assert abs(result["loss"] - result["engine_loss"]) <= 1e-5, result
    assert result["hello_world"] == [31373, 995] and result["activation"] == "gelu_new"
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert config["vocab_size"] == 50257 and config["zerolab"]["iteration"] == ITERATIONS


def test_a_run_without_a_checkpoint_is_refused_with_the_key_that_saves_one(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    (run / "run.json").write_text('{"name": "tiny"}')
    (run / "recipe.yaml").write_text("base: [model/gpt2-tiny]\n")
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
    (run / "recipe.yaml").write_text("base: [model/gpt2-tiny]\n")
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
    recipe = (Path(__file__).resolve().parents[1] / "recipes" / "cpu" / "tiny_z3.yaml").read_text()
    (run / "recipe.yaml").write_text(recipe + "parallel:\n  tensor: 2\n")
    assert main(["export", str(run), "--out", str(tmp_path / "hf")]) == 2
    said = capsys.readouterr().err
    assert "tensor parallel 2 is not exported" in said and "parallel.tensor=1" in said
    assert not (tmp_path / "hf").exists()
