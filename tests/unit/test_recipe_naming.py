"""A run's name says what ran: the recipe's stem and the overrides that change the setup, never
the ones that only say where the run reads or reports."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from zerolab.cli import main
from zerolab.recipe.compose import load_recipe
from zerolab.recipe.facts import run_facts
from zerolab.recipe.naming import MAX_LENGTH, renamed, run_name

GPT2_Z3 = "recipes/gpt2_z3.yaml"


def test_overrides_that_change_the_setup_name_the_run_and_the_render_says_so(repo_root, monkeypatch, capsys):
    monkeypatch.chdir(repo_root)
    overrides = ["model=gpt2-355m", "zero=z2", "precision=fp16", "hardware.procs_per_node=1"]
    plumbing = [
        "hardware.master_port=29611",
        "data.path=/data/owt/owt_text_document",
        "logging.wandb_mode=offline",
    ]
    recipe = load_recipe(GPT2_Z3, [*overrides, *plumbing])
    assert recipe.name == "gpt2_z3+model=gpt2-355m+zero=z2+precision=fp16+hardware.procs_per_node=1"
    assert load_recipe(GPT2_Z3, plumbing).name == "gpt2_z3"
    assert main(["render", GPT2_Z3, *overrides]) == 0
    header = capsys.readouterr().out.splitlines()[:3]
    assert header[0].startswith("# recipes/gpt2_z3.yaml (its description: GPT-2 1.5B, dolly-15k, 2 GPUs")
    assert header[1].startswith(
        "# overridden: model=gpt2-355m zero=z2 precision=fp16 hardware.procs_per_node=1"
    )
    assert header[1].endswith(f"(runs as {recipe.name})")
    assert (
        "gpt2-355m | world 1 = 1 node(s) x 1" in header[2] and "ZeRO 2" in header[2] and "fp16" in header[2]
    )


@given(st.lists(st.text(min_size=1, max_size=40).map(lambda value: f"train.seed={value}"), max_size=6))
def test_a_name_is_always_one_safe_directory_name(overrides):
    name = run_name("gpt2_z1", overrides)
    assert name.startswith("gpt2_z1") and len(name) <= MAX_LENGTH
    assert "/" not in name and "\0" not in name and name not in {".", ".."}
    assert all(character.isascii() and character.isprintable() and character != " " for character in name)


def test_a_resumed_run_is_named_by_its_new_overrides_in_place_of_the_old():
    assert renamed("tiny_z1+train.iters=20+zero=z2", ["train.iters=40", "hardware.master_port=29500"]) == (
        "tiny_z1+zero=z2+train.iters=40"
    )
    assert renamed("tiny_z1+train.iters=20", []) == "tiny_z1+train.iters=20"
    sweep_cell = "zero=z1,micro=4"
    assert renamed(sweep_cell, ["train.iters=40"]) == "zero=z1,micro=4+train.iters=40"


def test_a_changed_shape_is_not_called_by_its_blocks_name(repo_root, monkeypatch, capsys):
    monkeypatch.chdir(repo_root)
    recipe = load_recipe("cpu/tiny_z1", ["model.num_layers=4", "model.hidden_size=128"])
    assert run_facts(recipe).model == "gpt2-tiny+num_layers=4+hidden_size=128"
    assert load_recipe("cpu/tiny_z1", ["model=gpt2-124m", "model.seq_length=64"]).model.name == "gpt2-124m"
    assert main(["estimate", "gpt2_z1", "model.hidden_size=1200"]) == 0
    assert "gpt2-1.5b+hidden_size=1200 | world 2" in capsys.readouterr().out
