"""The CPU demo is one sweep whose five cells launch exactly what the five CPU recipes launch
(the runs themselves: `make demo`; a real sweep: tests/engine/test_sweep_engine.py)."""

from __future__ import annotations

from zerolab.commands.demo import DATA_OUT, NAME, RECIPE, demo_sweep
from zerolab.recipe.compose import load_recipe
from zerolab.recipe.inputs import SUFFIX
from zerolab.recipe.render import render

FIVE_RECIPES = ("cpu/tiny_dp", "cpu/tiny_z1", "cpu/tiny_z2", "cpu/tiny_z3", "cpu/tiny_z3_offload")


def test_the_demo_sweep_launches_exactly_the_five_cpu_recipes():
    sweep = demo_sweep([])
    assert [cell.name for cell in sweep.cells] == [
        "zero-z0",
        "zero-z1",
        "zero-z2",
        "zero-z3",
        "zero-z3_offload",
    ]
    for cell, name in zip(sweep.cells, FIVE_RECIPES, strict=True):
        swept, recipe = load_recipe(RECIPE, cell.overrides), load_recipe(name)
        assert render(swept, run_dir="/runs/x") == render(recipe, run_dir="/runs/x"), name
        # the resolved recipes differ only in zero.pin_memory, which renders nothing without offload
        unused = {"base": True, "description": True, "zero": {"pin_memory"}}
        assert swept.model_dump(exclude=unused) == recipe.model_dump(exclude=unused)
        assert swept.zero.pin_memory is False
    assert [(cell.values["zero"]) for cell in sweep.cells] == ["z0", "z1", "z2", "z3", "z3_offload"]


def test_demo_overrides_apply_to_every_setup():
    sweep = demo_sweep(["train.iters=100"])
    assert all(cell.overrides[-1] == "train.iters=100" for cell in sweep.cells)
    assert sweep.default_name() != NAME and sweep.keys == ("zero",)


def test_the_demo_sample_and_dolly_15k_never_share_a_path():
    """make demo prepares the 151-record sample where the CPU recipes read it, never where the
    dolly-15k recipes do; and those refuse a dataset that small (tests/unit/test_launch_rundir.py)."""

    cpu, gpu = load_recipe(RECIPE), load_recipe("gpt2_z1")
    assert cpu.data.path == f"{DATA_OUT}{SUFFIX}" != gpu.data.path
    assert (cpu.data.name, cpu.data.min_documents) == ("dolly-sample", None)
    assert (gpu.data.name, gpu.data.min_documents) == ("dolly", 15000)
