"""The real engine accepts every shipped recipe's render: Megatron's parse_args,
validate_args and build_num_microbatches_calculator at the recipe's world size, and
DeepSpeed's DeepSpeedConfig (at the recipe's data-parallel size, as Megatron hands it
over) and DeepSpeedZeroConfig. It also rejects renders that our checks refuse.
One engine subprocess checks them all (its imports take most of the time)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from zerolab.recipe import load_recipe, render

REPO = Path(__file__).resolve().parents[1]
SHIPPED = sorted(
    str(p.relative_to(REPO / "recipes").with_suffix("")) for p in (REPO / "recipes").rglob("*.yaml")
)

CHECKER = r'''
import json, os, sys, traceback

cases_file, results_file, store_file = sys.argv[1:4]
cases = json.load(open(cases_file))
sys.path.insert(0, os.getcwd())
import deepspeed
from deepspeed.runtime.config import DeepSpeedConfig
from deepspeed.runtime.zero.config import DeepSpeedZeroConfig
from megatron.arguments import parse_args, validate_args
from megatron.microbatches import build_num_microbatches_calculator

deepspeed.init_distributed(dist_backend="gloo", auto_mpi_discovery=False, verbose=False,
                           init_method="file://" + store_file, rank=0, world_size=1)


class DataParallelGroup:
    """What DeepSpeedConfig asks of Megatron's mpu: the data-parallel size."""

    def __init__(self, size):
        self.size = size

    def get_data_parallel_world_size(self):
        return self.size


results = {}
for case in cases:
    outcome = {}
    try:
        os.environ["WORLD_SIZE"] = str(case["world_size"])
        sys.argv = ["pretrain_gpt.py", *case["megatron_args"]]
        args = parse_args()
        validate_args(args)
        calculator = build_num_microbatches_calculator(args)
        outcome["megatron"] = {"num_microbatches": calculator.get(), "zero_stage": args.zero_stage,
                               "data_parallel_size": args.data_parallel_size, "train_iters": args.train_iters}
    except BaseException as error:
        outcome["megatron_error"] = repr(error) or traceback.format_exc(limit=1)
    try:
        DeepSpeedZeroConfig(**case["ds_config"]["zero_optimization"])
        config = DeepSpeedConfig(case["ds_config"], mpu=DataParallelGroup(case["data_parallel"]))
        outcome["deepspeed"] = {"train_batch_size": config.train_batch_size,
                                "gradient_accumulation_steps": config.gradient_accumulation_steps,
                                "zero_stage": config.zero_optimization_stage}
    except BaseException as error:
        outcome["deepspeed_error"] = repr(error)
    results[case["name"]] = outcome
json.dump(results, open(results_file, "w"))
'''


def case(name, recipe, tmp_path):
    launch = render(recipe)
    config_file = tmp_path / f"{name.replace('/', '__')}.json"
    config_file.write_text(json.dumps(launch.ds_config))
    argv = launch.with_ds_config_path(str(config_file)).argv
    script = next(i for i, token in enumerate(argv) if token.endswith("pretrain_gpt.py"))
    return {
        "name": name,
        "megatron_args": argv[script + 1 :],
        "ds_config": launch.ds_config,
        "world_size": launch.world_size,
        "data_parallel": recipe.data_parallel_size,
    }


def unchecked(name, **changes):
    """A shipped recipe changed after its checks ran: what our checks would have refused."""
    recipe = load_recipe(name)
    for key, value in changes.items():
        section, field = key.split("__")
        setattr(getattr(recipe, section), field, value)
    return recipe


def test_engine_accepts_every_shipped_render_and_rejects_what_we_refuse(engine, tmp_path):
    engine_dir, engine_python = engine
    recipes = {name: load_recipe(name) for name in SHIPPED}
    refused = {
        "bad: global batch not a multiple": unchecked("cpu/tiny_z1", train__global_batch_size=6),
        "bad: seq beyond positions": unchecked("cpu/tiny_z1", model__seq_length=256),
        "bad: fp16 and bf16": unchecked("gpt2_z1", precision__fp16=True),
    }
    cases = [case(name, recipe, tmp_path) for name, recipe in {**recipes, **refused}.items()]
    (tmp_path / "cases.json").write_text(json.dumps(cases))
    (tmp_path / "checker.py").write_text(CHECKER)
    env = {**os.environ, "DS_ACCELERATOR": "cpu", "RANK": "0", "PYTHONPATH": str(engine_dir)}
    run = subprocess.run(
        [str(engine_python), str(tmp_path / "checker.py"), str(tmp_path / "cases.json"),
         str(tmp_path / "results.json"), str(tmp_path / "pg-store")],
        cwd=engine_dir, env=env, capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    results = json.loads((tmp_path / "results.json").read_text())

    for name, recipe in recipes.items():
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
