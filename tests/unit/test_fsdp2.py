"""The second engine's recipe side, without the engine: `engine: fsdp2` renders the torchrun command
of zerolab's FSDP2 loop and its request.json (no ds_config), maps the zero section as
docs/engines.md tables it, and refuses what FSDP2 cannot carry before anything launches, naming
each key (exit 2). The training itself is tests/engine/test_fsdp2_engine.py's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from zerolab.cli import main
from zerolab.contracts import FSDP2_TRAIN_MODULE
from zerolab.recipe.compose import load_recipe
from zerolab.recipe.facts import run_facts
from zerolab.recipe.fsdp2 import ZERO_TO_FSDP2
from zerolab.recipe.render import render

ENGINE_DIR = "/opt/Megatron-DeepSpeed"


@pytest.fixture(autouse=True)
def neutral_engine_dir(monkeypatch):
    monkeypatch.setenv("ZEROLAB_ENGINE_DIR", ENGINE_DIR)


@pytest.mark.parametrize(
    ("recipe", "sharding", "reshard", "offload"),
    [
        ("cpu/tiny_fsdp2_dp", "ddp", False, False),
        ("cpu/tiny_fsdp2_z2", "fsdp2", False, False),
        ("cpu/tiny_fsdp2_z3", "fsdp2", True, False),
        ("cpu/tiny_fsdp2_z3_offload", "fsdp2", True, True),
    ],
)
def test_each_zero_setup_becomes_its_fsdp2_setup(recipe, sharding, reshard, offload):
    launch = render(load_recipe(recipe))
    request = launch.request
    assert (request.sharding, request.reshard_after_forward, request.cpu_offload) == (
        sharding,
        reshard,
        offload,
    )
    assert launch.argv[: launch.argv.index("-m") + 2][-2:] == ["-m", FSDP2_TRAIN_MODULE]
    assert launch.argv[0] == "torchrun" and launch.argv[-1].endswith("/request.json")
    assert launch.ds_config == {}
    assert request.engine == ENGINE_DIR


def test_the_request_holds_the_recipes_numbers():
    recipe = load_recipe("cpu/tiny_fsdp2_z3", ["train.iters=7", "model.init_from=imports/tiny"])
    request = render(recipe).request
    assert request.train_iters == 7 and request.global_batch_size == 8 and request.micro_batch_size == 2
    assert request.model["vocab_size"] == 50304  # the engine's padded vocabulary, as Megatron's model has it
    assert request.model["activation_function"] == "gelu_new"
    assert request.init_from == "imports/tiny/tp1_pp1"
    assert request.data_path == ["data/dolly-sample_text_document"] and request.split == "98,2,0"
    assert (request.lr, request.min_lr, request.lr_warmup_iters) == (1e-3, 1e-4, 5)


def test_a_zero_stage_1_trains_as_stage_2():
    z1 = render(load_recipe("cpu/tiny_fsdp2_z2", ["zero=z1"])).request
    z2 = render(load_recipe("cpu/tiny_fsdp2_z2")).request
    assert z1 == z2


def test_render_prints_the_torchrun_command_and_the_request(capsys):
    assert main(["render", "cpu/tiny_fsdp2_z3"]) == 0
    out = capsys.readouterr().out
    assert f"-m {FSDP2_TRAIN_MODULE}" in out and '"sharding": "fsdp2"' in out


@pytest.mark.parametrize(
    ("override", "key"),
    [
        ("parallel.tensor=2", "parallel.tensor"),
        ("parallel.pipeline=2", "parallel.pipeline"),
        ("zero.reduce_bucket_size=1000", "zero.reduce_bucket_size"),
        ("extra.megatron_args=[--use-rotary-position-embeddings]", "extra.megatron_args"),
        ("activation_checkpointing=selective", "activation_checkpointing.granularity"),
        ("hardware.launcher=deepspeed", "hardware.launcher"),
        ("logging.tensorboard=true", "logging.tensorboard"),
        ("moe.num_experts=2", "moe.num_experts"),
    ],
)
def test_what_fsdp2_cannot_carry_is_refused_before_launch_naming_the_key(override, key, capsys, tmp_path):
    run_dir = tmp_path / "run"
    assert main(["launch", "cpu/tiny_fsdp2_z3", override, "--run-dir", str(run_dir)]) == 2
    err = capsys.readouterr().err
    assert "engine fsdp2 cannot carry" in err and key in err and "engine=megatron-deepspeed" in err
    assert not run_dir.exists()


def test_fp16_is_refused_with_bf16_named():
    with pytest.raises(Exception, match="fp16's loss scaling") as refused:
        load_recipe("cpu/tiny_fsdp2_z3", ["hardware=gpu-1node-2", "precision=fp16"])
    assert "precision.fp16" in str(refused.value)


def test_a_fine_tuning_is_not_trained_on_fsdp2(capsys):
    assert main(["render", "finetune/cpu/tiny_wnli_dp", "engine=fsdp2"]) == 2
    assert "engine fsdp2 is for pretraining" in capsys.readouterr().err


def test_the_request_file_reads_back(tmp_path):
    launch = render(load_recipe("cpu/tiny_fsdp2_z3"), run_dir=str(tmp_path))
    launch.write_config(tmp_path, {})
    assert json.loads((tmp_path / "request.json").read_text()) == launch.request.as_json()


def test_docs_engines_tables_the_mapping_the_loop_is_given():
    text = (Path(__file__).resolve().parents[2] / "docs" / "engines.md").read_text()
    rows = [line for line in text.splitlines() if line.startswith("| ") and not line.startswith("| recipe")]
    assert rows == [f"| {key} | {what} |" for key, what in ZERO_TO_FSDP2]


def test_run_json_names_the_engine_and_the_fsdp2_setup():
    fsdp2 = run_facts(load_recipe("cpu/tiny_fsdp2_z3"))
    assert fsdp2.engine == "fsdp2" and fsdp2.fsdp2_setup == "fully_shard, weights resharded after forward"
    assert run_facts(load_recipe("cpu/tiny_z3")).engine == "megatron-deepspeed"
