"""`zerolab export` proven equal, not assumed. Every shared run of the session (engine_runs.SHARED_RUNS:
ZeRO 0, 1, 2 keep whole fp32 weights in each rank's model file; ZeRO 3, with the optimizer or also
the weights offloaded, keeps pieces that DeepSpeed's zero_to_fp32 puts together; tensor parallel 2
keeps halves; pipeline parallel 2, with ZeRO 0 or 1, keeps layer files; bf16 keeps bf16 weights),
exported and loaded by the real transformers, gives the logits and loss of the engine's own forward
pass of the weights it trained and saved (the forward_probe patch, run at the end of training) on
held-out tokens; the five demo setups' exports agree with each other, since ZeRO does not change
the arithmetic; and an export fine-tunes on GLUE (zerolab.rank.finetune_loop) as it is. The tiny GPT-2
on CPU, 2 ranks over gloo; skipped, with the reason, without the engine. fp16 is not here:
DeepSpeed refuses fp16 on CPU."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import textwrap
from pathlib import Path
from typing import Any

import pytest
from engine_runs import DEMO_SETUPS, ITERATIONS, SHARED_RUNS
from finetune_runs import fine_tune

from zerolab.cli import main
from zerolab.rank.forward_probe import OUTPUT_FILE, PROBE_ENV

TOLERANCE = {"bf16": (0.05, 0.01)}
"""(max abs logit difference, loss difference) where the engine computes in bf16 and transformers
in fp32 from the same weights; fp32 everywhere else: (1e-4, 1e-5)."""

COMPARE = """
import json, sys, torch
from transformers import AutoTokenizer, GPT2LMHeadModel
results = {}
for exported, probe in json.loads(sys.argv[1]):
    rows = torch.tensor(json.load(open(f"{probe}/tokens.json")))
    engine = torch.load(f"{probe}/engine.pt")
    model = GPT2LMHeadModel.from_pretrained(exported).eval()
    with torch.no_grad():
        logits = model(rows[:, :-1]).logits
    loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), rows[:, 1:].flatten())
    tokenizer = AutoTokenizer.from_pretrained(exported)
    results[exported] = {
        "max_abs_logit_difference": (engine["logits"] - logits).abs().max().item(),
        "loss": loss.item(),
        "engine_loss": engine["loss"],
        "hello_world": tokenizer("hello world")["input_ids"],
        "activation": model.config.activation_function,
    }
print(json.dumps(results))
"""


def _engine_python_json(python: Path, code: str, *args: str) -> Any:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", PROBE_ENV)}
    done = subprocess.run(
        [str(python), "-c", textwrap.dedent(code), *args], capture_output=True, text=True, env=env, check=True
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def exported(trained, tmp_path_factory):
    """`exported(SETUP)`: the shared run's checkpoint exported by `zerolab export`, once."""
    done: dict[str, Path] = {}

    def get(setup: str) -> Path:
        if setup not in done:
            out = tmp_path_factory.mktemp("export") / setup
            assert main(["export", str(trained(setup).run_dir), "--out", str(out)]) == 0
            done[setup] = out
        return done[setup]

    return get


@pytest.fixture(scope="module")
def compared(engine, trained, exported) -> dict[str, dict[str, Any]]:
    """Each shared run's export against the engine's forward pass of its final weights, in one call
    of the engine's Python: by setup, the largest logit difference, both losses, and what the
    exported tokenizer and config say."""
    trained.each(SHARED_RUNS)
    pairs = [(str(exported(setup)), str(trained(setup).probe)) for setup in SHARED_RUNS]
    _, python = engine
    results = _engine_python_json(python, COMPARE, json.dumps(pairs))
    return {setup: results[str(exported(setup))] for setup in SHARED_RUNS}


@pytest.mark.parametrize("setup", list(SHARED_RUNS))
def test_an_export_gives_the_engines_own_logits(trained, exported, compared, setup):
    hf = exported(setup)
    assert sorted(p.name for p in hf.iterdir()) == [
        "config.json",
        "model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
    ]
    assert "zerolab: patch forward_probe" in trained(setup).text
    assert (trained(setup).probe / OUTPUT_FILE).is_file()
    result = compared[setup]
    logits_within, loss_within = TOLERANCE.get(setup, (1e-4, 1e-5))
    assert result["max_abs_logit_difference"] <= logits_within, result
    assert abs(result["loss"] - result["engine_loss"]) <= loss_within, result
    assert result["hello_world"] == [31373, 995] and result["activation"] == "gelu_new"
    config = json.loads((hf / "config.json").read_text())
    assert config["vocab_size"] == 50257 and config["zerolab"]["iteration"] == ITERATIONS


AGREE = """
import itertools, json, sys, torch
from transformers import GPT2LMHeadModel
rows = torch.tensor(json.load(open(f"{sys.argv[1]}/tokens.json")))
logits = {}
for folder in sys.argv[2:]:
    model = GPT2LMHeadModel.from_pretrained(folder).eval()
    with torch.no_grad():
        logits[folder] = model(rows[:, :-1]).logits
print(json.dumps(max((a - b).abs().max().item() for a, b in itertools.combinations(logits.values(), 2))))
"""


def test_the_five_demo_setups_export_the_same_model(engine, trained, exported):
    """ZeRO does not change the arithmetic: three iterations of each setup end with the same weights
    (to the float rounding of their different reduction orders), ZeRO-3's consolidated pieces
    included."""
    _, python = engine
    folders = [str(exported(setup)) for setup in (*DEMO_SETUPS, "z3_offload_param")]
    assert _engine_python_json(python, AGREE, str(trained("z0").probe), *folders) <= 1e-4


READ_ARGUMENTS = """
import json, sys
sys.path[:0] = [sys.argv[1], sys.argv[2]]
import hf_gpt2
request = {"checkpoints": sys.argv[3], "iteration": int(sys.argv[4]), "zero_stage": int(sys.argv[5]),
           "tensor_parallel": 1, "pipeline_parallel": 1}
weights, args = hf_gpt2.megatron_state(request)
watched = ("megatron", "deepspeed", "torch._dynamo", "transformers.models.gpt2.modeling_gpt2")
print(json.dumps([args.model_type.name, args.num_layers, *(name in sys.modules for name in watched)]))
"""


@pytest.mark.parametrize(("setup", "zero_stage", "deepspeed"), [("z0", 0, False), ("z3", 3, True)])
def test_an_export_reads_the_runs_arguments_without_importing_megatron(
    setup, zero_stage, deepspeed, engine, trained
):
    """The arguments in a checkpoint hold Megatron's ModelType: it is read from megatron/core/enums.py
    alone, since importing Megatron imports DeepSpeed (an export of 13 s took 6 without it). ZeRO-3's
    pieces are put together by DeepSpeed, imported without torch's compiler or transformers' models
    (a ZeRO-3 export of 13 s took 6.5)."""
    engine_dir, python = engine
    rank_dir = Path(__file__).resolve().parents[2] / "zerolab" / "rank"
    checkpoints = trained(setup).run_dir / "checkpoints"
    paths = (str(rank_dir), str(engine_dir), str(checkpoints))
    read = _engine_python_json(python, READ_ARGUMENTS, *paths, str(ITERATIONS), str(zero_stage))
    assert read == ["encoder_or_decoder", 2, False, deepspeed, False, False]


def test_a_run_directory_fine_tunes_on_glue_exported_at_launch(trained, tmp_path):
    # pretrain -> fine-tune: a run directory given as the model is exported into the new run's model/
    # (by the launch, before its one rank starts)
    records = fine_tune(trained("z0").run_dir, "dp", tmp_path / "finetune", "hardware.procs_per_node=1")
    assert (tmp_path / "finetune" / "model" / "config.json").is_file()
    losses = [record["loss"] for record in records if record["kind"] == "train"]
    [scored] = [record for record in records if record["kind"] == "eval"]
    assert len(losses) == 4 and all(0 < loss < 10 for loss in losses), losses
    assert 0 <= scored["accuracy"] <= 1 and scored["loss"] > 0, scored


@pytest.mark.parametrize(
    ("setup", "cut"),
    [
        ("z0", "mp_rank_00_model_states.pt"),  # whole weights in each rank's model file
        ("z3", "zero_pp_rank_1_mp_rank_00_optim_states.pt"),  # a piece zero_to_fp32 puts together
    ],
)
def test_a_checkpoint_file_cut_short_is_named_with_the_fix(setup, cut, trained, tmp_path, capsys):
    run = tmp_path / "copied-run"
    shutil.copytree(trained(setup).run_dir, run)
    step = run / "checkpoints" / f"global_step{ITERATIONS}"
    cut_file = step / cut
    os.truncate(cut_file, cut_file.stat().st_size // 2)  # a copy that stopped half way
    assert main(["export", str(run), "--out", str(tmp_path / "hf")]) == 2
    err = capsys.readouterr().err
    assert f"{cut_file}: cut short or damaged, not a checkpoint torch can read" in err, err
    assert "copy the checkpoint again" in err and "--iteration" in err and "Traceback" not in err
    assert not (tmp_path / "hf").exists()


def test_a_pipeline_checkpoint_without_a_layer_file_is_refused_not_exported_short(trained, tmp_path, capsys):
    run = tmp_path / "copied-run"
    shutil.copytree(trained("pp2").run_dir, run)
    step = run / "checkpoints" / f"global_step{ITERATIONS}"
    (step / "layer_02-model_00-model_states.pt").unlink()  # the first transformer layer's (1: the embedding)
    for argv in (
        ["export", str(run), "--out", str(tmp_path / "hf")],
        ["eval", str(run), "--task", "wikitext", "--data", "sample"],
    ):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert f"{step}: 12 tensors of the run's 2-layer GPT-2 missing (transformer.h.0." in err, err
        assert "a file of the checkpoint is missing" in err
    assert not (tmp_path / "hf").exists() and not (run / "eval.json").exists()
