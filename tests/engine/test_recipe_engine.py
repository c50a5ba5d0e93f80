"""The real engine accepts every shipped recipe's render: Megatron's parse_args,
validate_args and build_num_microbatches_calculator at the recipe's world size, and
DeepSpeed's DeepSpeedConfig (at the recipe's data-parallel size, as Megatron hands it
over) and DeepSpeedZeroConfig. It also rejects renders that our checks refuse.
One engine subprocess checks them all (zerolab.engine.engine_check, the same check that
extra settings get before a launch)."""

from __future__ import annotations

import json
from pathlib import Path

from zerolab.cli import main
from zerolab.engine.engine_check import Case, judge, megatron_args_of
from zerolab.recipe.compose import load_recipe
from zerolab.recipe.render import render

REPO = Path(__file__).resolve().parents[2]
SHIPPED = sorted(
    str(p.relative_to(REPO / "recipes").with_suffix(""))
    for p in (REPO / "recipes").rglob("*.yaml")
    # fine-tuning and FSDP2 launch no pretrain_gpt.py: tests/engine/test_finetune_engine.py and
    # test_fsdp2_engine.py
    if "finetune" not in p.parts and "_fsdp2_" not in p.name
)


def case(name, recipe):
    launch = render(recipe)
    return Case(
        name=name,
        megatron_args=megatron_args_of(launch.argv),
        ds_config=launch.ds_config,
        world_size=launch.world_size,
        data_parallel=recipe.data_parallel_size,
    )


def unchecked(name, **changes):
    """A shipped recipe changed after its checks ran: what our checks would have refused."""
    recipe = load_recipe(name)
    for key, value in changes.items():
        section, field = key.split("__")
        setattr(getattr(recipe, section), field, value)
    return recipe


def test_engine_accepts_every_shipped_render_and_rejects_what_we_refuse(engine):
    recipes = {name: load_recipe(name) for name in SHIPPED}
    refused = {
        "bad: global batch not a multiple": unchecked("cpu/tiny_z1", train__global_batch_size=6),
        "bad: seq beyond positions": unchecked("cpu/tiny_z1", model__seq_length=256),
        "bad: fp16 and bf16": unchecked("gpt2_z1", precision__fp16=True),
    }
    flash = {"gpt2_z1 flash": load_recipe("gpt2_z1", ["model.attention=flash"])}
    results = judge([case(name, recipe) for name, recipe in {**recipes, **flash, **refused}.items()])

    for name, recipe in {**recipes, **flash}.items():
        outcome = results[name]
        assert "megatron_error" not in outcome and "deepspeed_error" not in outcome, (name, outcome)
        ga = recipe.gradient_accumulation_steps
        assert outcome["megatron"]["num_microbatches"] == ga, name
        assert outcome["megatron"]["data_parallel_size"] == recipe.data_parallel_size, name
        assert outcome["megatron"]["zero_stage"] == recipe.zero.stage == outcome["deepspeed"]["zero_stage"], (
            name
        )
        assert outcome["deepspeed"]["gradient_accumulation_steps"] == ga, name
        assert outcome["deepspeed"]["train_batch_size"] == recipe.train.global_batch_size, name

    assert "megatron_error" in results["bad: global batch not a multiple"]
    assert "megatron_error" in results["bad: seq beyond positions"]
    assert "megatron_error" in results["bad: fp16 and bf16"]
    assert "deepspeed_error" in results["bad: fp16 and bf16"]


def test_extra_settings_are_judged_by_the_engine_before_anything_is_written(
    engine, dataset, capsys, tmp_path
):

    # a bad flag and a bad key in one render (one engine check): each judge names its own refusal
    bad_flag = "extra.megatron_args=[--log-params-norm, --no-such-flag]"
    bad_key = "extra.ds_config={zero_optimization: {round_robin_gradientz: true}}"
    assert main(["render", "cpu/tiny_z1", bad_flag, bad_key, "--json"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "Megatron: pretrain_gpt.py: error: unrecognized arguments: --no-such-flag" in captured.err
    assert "DeepSpeed: ValidationError" in captured.err and "round_robin_gradientz" in captured.err

    bad_value = "extra.megatron_args=[--sgd-momentum, half]"
    run_dir = tmp_path / "run"
    assert main(["launch", "cpu/tiny_z1", f"data.path={dataset}", bad_value, "--run-dir", str(run_dir)]) == 2
    assert "invalid float value: 'half'" in capsys.readouterr().err
    assert not run_dir.exists()

    good = [
        "extra.megatron_args=[--log-params-norm]",
        "extra.ds_config={zero_optimization: {round_robin_gradients: true}}",
    ]
    assert main(["render", "cpu/tiny_z1", *good, "--json"]) == 0
    rendered = json.loads(capsys.readouterr().out)
    assert rendered["argv"][-1] == "--log-params-norm"
    assert rendered["ds_config"]["zero_optimization"]["round_robin_gradients"] is True


def test_a_ds_config_key_deepspeed_never_reads_is_refused_with_the_key_it_reads(engine, capsys):

    # a misspelt key at the top and one inside a block, in one render (one engine check): each named
    misspelt = "{comms_loger: {enabled: true}, flops_profiler: {profile_stp: 3}}"
    assert main(["render", "cpu/tiny_z1", f"extra.ds_config={misspelt}", "--json"]) == 2
    told = capsys.readouterr().err
    assert "`comms_loger` is not read by DeepSpeed; did you mean `comms_logger`?" in told
    assert (
        "`flops_profiler.profile_stp` is not read by DeepSpeed; did you mean `flops_profiler.profile_step`?"
        in told
    )

    read = "{flops_profiler: {profile_step: 3}, comms_logger: {enabled: true}, csv_monitor: {enabled: false}}"
    assert main(["render", "cpu/tiny_z1", f"extra.ds_config={read}", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["ds_config"]["flops_profiler"] == {"profile_step": 3}


UPSTREAM_BLOCKS = {
    # the blocks of examples_deepspeed's curriculum, compression and data-efficiency configs that
    # DeepSpeed copies whole or walks (copy.copy, items(), `in block.keys()`) and reads later (a
    # curriculum on a schedule the curriculum section does not render: fixed_discrete)
    "curriculum_learning": {
        "enabled": True,
        "curriculum_type": "seqlen",
        "min_difficulty": 80,
        "max_difficulty": 128,
        "schedule_type": "fixed_discrete",
        "schedule_config": {"difficulty": [80, 128], "max_step": [100]},
    },
    "compression_training": {
        "weight_quantization": {
            "shared_parameters": {"enabled": True, "quantize_groups": 48, "quantization_type": "symmetric"},
            "different_groups": {
                "wq1": {
                    "params": {"start_bits": 12, "target_bits": 4, "quantization_period": 50},
                    "modules": ["encoder.layers"],
                }
            },
        },
    },
    "data_efficiency": {
        "enabled": True,
        "seed": 1234,
        "data_routing": {
            "enabled": True,
            "random_ltd": {
                "enabled": True,
                "total_layer_num": 2,
                "random_ltd_layer_num": 1,
                "random_ltd_layer_id": [1],
                "model_mask_name": "attention_mask",
                "model_type": "decoder",
                "hidden_state_order": "seq_batch_dim",
                "random_ltd_schedule": {
                    "min_value": 64,
                    "max_value": 128,
                    "schedule_type": "fixed_linear",
                    "schedule_config": {"require_steps": 100, "seq_per_step": 16},
                },
            },
        },
        "data_sampling": {
            "enabled": True,
            "num_workers": 0,
            "curriculum_learning": {
                "enabled": True,
                "data_cluster_path": "clusters",
                "curriculum_metrics": {
                    "vocabularyrarity": {
                        "index_to_sample_path": "index_to_sample",
                        "index_to_metric_path": "index_to_metric",
                        "difficulty_type": "percentile",
                        "clustering_type": "schedule_based",
                        "min_difficulty": 1,
                        "max_difficulty": 100,
                        "schedule_type": "fixed_root",
                        "schedule_config": {
                            "total_curriculum_step": 100,
                            "difficulty_step": 1,
                            "root_degree": 2,
                        },
                    }
                },
            },
        },
    },
}


def test_blocks_deepspeed_reads_whole_are_not_refused_and_a_misspelling_beside_them_still_is(engine, capsys):

    # one engine check each: the upstream blocks alone pass; with a misspelt key where DeepSpeed
    # reads key by key (shared_parameters), that key alone is refused
    assert main(["render", "cpu/tiny_z1", f"extra.ds_config={json.dumps(UPSTREAM_BLOCKS)}", "--json"]) == 0
    rendered = json.loads(capsys.readouterr().out)["ds_config"]
    assert rendered["curriculum_learning"]["curriculum_type"] == "seqlen"

    misspelt = json.loads(json.dumps(UPSTREAM_BLOCKS))
    misspelt["compression_training"]["weight_quantization"]["shared_parameters"]["quantize_grups"] = 4
    assert main(["render", "cpu/tiny_z1", f"extra.ds_config={json.dumps(misspelt)}", "--json"]) == 2
    told = capsys.readouterr().err
    assert "shared_parameters.quantize_grups` is not read by DeepSpeed; did you mean" in told
    assert told.count("is not read by DeepSpeed") == 1, told
