"""The schema documents itself, the generated reference is current, YAML numbers are
numbers, and the recipe scripts are one thin launcher."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from pydantic import BaseModel

from zerolab.cli import main
from zerolab.errors import UserError
from zerolab.recipe.compose import load_recipe
from zerolab.recipe.reference import REFERENCE_FILE, generate
from zerolab.recipe.render import render
from zerolab.recipe.schema import SECTIONS, Recipe, section_class
from zerolab.recipe.yaml_io import parse_yaml

REPO = Path(__file__).resolve().parents[2]


def test_reference_doc_is_current():
    assert REFERENCE_FILE.read_text() == generate(), "docs/recipe-reference.md is stale: run `make docs`"


def test_a_building_blocks_description_is_its_whole_opening_comment():
    row = next(line for line in generate().splitlines() if line.startswith("| `zero/z3_offload_param` |"))
    assert row.endswith("fetched to the device layer by layer (ZeRO-Infinity's CPU offload). |")


def test_every_field_has_a_doc_and_sizes_have_units():
    for section in SECTIONS:
        model = section_class(Recipe.model_fields[section].annotation)
        assert model is not None and issubclass(model, BaseModel)
        for name, info in model.model_fields.items():
            assert info.description, f"{section}.{name} has no description"
            assert f"`{section}.{name}`" in REFERENCE_FILE.read_text()
    units = {
        name: (info.json_schema_extra or {}).get("unit")
        for name, info in Recipe.model_fields["train"].annotation.model_fields.items()
    }
    assert units["micro_batch_size"] == "sequences" and units["tokens"] == "tokens"


def test_yaml_reads_exponent_numbers_as_numbers():
    data = parse_yaml("a: 6e-4\nb: 1e5\nc: 1.5e-4\nd: 6.0e-4\ne: 10\nf: '6e-4'\ng: .5\nh: 1_000\n", "test")
    assert data == {"a": 6e-4, "b": 1e5, "c": 1.5e-4, "d": 6e-4, "e": 10, "f": "6e-4", "g": 0.5, "h": 1000}
    assert isinstance(data["b"], float) and isinstance(data["e"], int)


def test_recipe_files_keep_numbers_typed():
    recipe = load_recipe("gpt2_z1")
    assert recipe.train.min_lr == 1e-5 and recipe.train.lr == 1.5e-4


def test_recipe_scripts_are_one_identical_executable_launcher():
    yamls = sorted((REPO / "recipes").rglob("*.yaml"))
    scripts = [y.with_suffix(".sh") for y in yamls]
    assert all(s.is_file() for s in scripts)
    assert len({s.read_bytes() for s in scripts}) == 1
    modes = subprocess.run(
        ["git", "ls-files", "-s", "recipes"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout
    for line in modes.splitlines():
        if line.endswith(".sh"):
            assert line.startswith("100755"), line


def test_recipe_script_dry_run_from_another_directory(tmp_path):
    script = REPO / "recipes" / "cpu" / "tiny_z3_offload.sh"
    run = subprocess.run(
        [str(script), "train.micro_batch_size=1", "--dry-run"], cwd=tmp_path, capture_output=True, text=True
    )
    assert run.returncode == 0, run.stderr
    assert "--cpu-optimizer" in run.stdout and "--micro-batch-size 1" in run.stdout
    assert list(tmp_path.iterdir()) == []


def test_the_recipes_page_shows_the_current_recipe_and_dry_run(monkeypatch, capsys):

    monkeypatch.setenv("ZEROLAB_ENGINE_DIR", "/opt/Megatron-DeepSpeed")
    readme = (REPO / "docs" / "recipes.md").read_text()
    assert (REPO / "recipes" / "gpt2_z3_offload.yaml").read_text() in readme
    command = "zerolab render recipes/gpt2_z3_offload.yaml train.micro_batch_size=2 --dry-run"
    shown = readme.split(f"$ {command}\n", 1)[1].split("```", 1)[0]
    assert main(command.split()[1:]) == 0
    assert capsys.readouterr().out == shown


@pytest.mark.parametrize("split", ["98,2,0", "969, 30, 1", "0.9,0.05,0.05", "90/10", "100", "98,1,1,5"])
def test_data_split_takes_every_form_the_engine_reads_and_renders_it_as_given(split):
    """Megatron's get_train_valid_test_split_ splits at commas, else slashes, and float()s each part
    (spaces and decimals allowed, the first three read): a launch's own --split is carried as written."""
    recipe = load_recipe("cpu/tiny_dp", [f"data.split={split}"])
    argv = render(recipe).argv
    assert argv[argv.index("--split") + 1] == split


@pytest.mark.parametrize("split", ["train", "98;2", "1,,2", "-1,2"])
def test_data_split_refuses_what_the_engine_cannot_read_naming_the_forms(split):
    with pytest.raises(UserError, match=r"data\.split.*numbers separated by commas or by slashes"):
        load_recipe("cpu/tiny_dp", [f"data.split={split}"])
