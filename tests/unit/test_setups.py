"""One name per ZeRO setup (recipe.setups) and one reader of a run's settings from its log
(logs.settings): the summary's setup column, the fit table's rows and the log's estimate agree."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from zerolab.estimate.from_log import recipe_from_log
from zerolab.locations import CONFIGS_DIR
from zerolab.logs.parse import parse_log
from zerolab.logs.settings import read_settings
from zerolab.recipe.compose import model_name_of_shape
from zerolab.recipe.setups import ZERO_SETUPS, setup_label, zero_setup, zero_variant
from zerolab.recipe.yaml_io import read_yaml_mapping

CPU = Path(__file__).parents[1] / "fixtures" / "logs" / "cpu-engine"


def test_the_setups_compared_are_the_zero_blocks_each_named_by_what_it_sets():
    blocks = sorted(path.stem for path in (CONFIGS_DIR / "zero").glob("*.yaml"))
    assert sorted(name for name, _ in ZERO_SETUPS) == blocks
    for name in blocks:
        zero = read_yaml_mapping(CONFIGS_DIR / "zero" / f"{name}.yaml")["zero"]
        variant = zero_variant(
            SimpleNamespace(**zero)
        )  # the block's keys, as a recipe's zero section has them
        assert zero_setup(zero["stage"], zero["offload_optimizer"], zero["offload_param"], **variant) == name


@pytest.mark.parametrize(
    ("setup", "label"),
    [
        ((2, True, False, 1, 1), "z2_offload"),
        ((3, False, True, 1, 1), "z3_offload_param"),
        ((1, None, None, 2, 1), "tp2_pp1_z1"),
        ((0, False, False, None, 4), "tp1_pp4_z0"),
    ],
)
def test_a_setup_label_names_offload_at_any_stage_and_model_parallelism(setup, label):
    assert setup_label(*setup) == label


def test_a_log_of_a_shipped_model_shape_is_called_by_that_models_name():
    assert (
        model_name_of_shape({"num_layers": 12, "hidden_size": 768, "num_attention_heads": 12}) == "gpt2-124m"
    )
    assert (
        model_name_of_shape({"num_layers": 2, "hidden_size": 64, "max_position_embeddings": 128})
        == "gpt2-tiny"
    )
    # one stated key that differs from every block: not that model
    assert (
        model_name_of_shape({"num_layers": 12, "hidden_size": 768, "num_attention_heads": 16})
        == "gpt-12L-768h"
    )
    assert model_name_of_shape({"num_layers": None, "hidden_size": 768}) is None


def _log_with(tmp_path: Path, name: str, *replacements: tuple[str, str]) -> Path:
    text = (CPU / name).read_text()
    for old, new in replacements:
        assert old in text
        text = text.replace(old, new)
    path = tmp_path / name
    path.write_text(text)
    return path


def test_the_settings_a_log_states_feed_the_summary_and_the_estimate_alike(tmp_path: Path):
    stated = read_settings(parse_log(CPU / "final_z3off.log"))
    assert (stated.zero_stage, stated.offload_optimizer, stated.offload_param) == (3, True, False)
    assert (stated.num_layers, stated.hidden_size, stated.world_size, stated.precision) == (2, 64, 2, "fp32")
    recipe, reasons = recipe_from_log(parse_log(CPU / "final_z3off.log"))
    assert reasons == [] and recipe is not None
    assert (recipe.zero.stage, recipe.zero.offload_optimizer, recipe.model.name) == (3, True, "gpt2-tiny")


def test_megatrons_cpu_optimizer_argument_counts_as_offload_from_stage_1(tmp_path: Path):
    cpu_optimizer = (
        "  cpu_optimizer ................................... False",
        "  cpu_optimizer ...... True",
    )
    log = parse_log(_log_with(tmp_path, "final_z1.log", cpu_optimizer))
    stated = read_settings(log)
    assert (stated.zero_stage, stated.offload_optimizer) == (1, True)
    recipe, _ = recipe_from_log(log)
    assert recipe is not None and recipe.zero.offload_optimizer
    assert read_settings(parse_log(CPU / "final_z1.log")).offload_optimizer is False
