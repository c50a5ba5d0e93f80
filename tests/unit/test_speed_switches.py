"""The speed switches as a recipe sees them: one schema key each, documented from the switch, on
by default when proven equal, rendered into ZEROLAB_SPEED for pretraining only, and a name the
engine does not know refused before any rank trains. Their arithmetic is proven on the engine
(tests/engine/test_speed_engine.py)."""

from __future__ import annotations

import os

import pytest
from engine_patch_helpers import run_entry

from zerolab.contracts import SPEED_ENV, SWITCH_NAMES, SWITCHES
from zerolab.rank.megatron_entry import LAUNCH_PATCHES
from zerolab.rank.speed_switches import launch_switches, set_on
from zerolab.recipe.compose import load_recipe
from zerolab.recipe.render import render
from zerolab.recipe.schema import SpeedSection


def test_each_switch_is_a_schema_key_with_its_doc_and_default():
    fields = SpeedSection.model_fields
    assert tuple(fields) == SWITCH_NAMES
    for switch in SWITCHES:
        assert fields[switch.name].description == switch.doc
        assert fields[switch.name].default is switch.equal  # proven equal: on by default
    assert [s.name for s in SWITCHES if not s.equal] == ["compiled_elementwise"]
    assert "off by default" in SpeedSection.model_fields["compiled_elementwise"].description


def test_render_names_the_switches_on_and_only_for_pretraining():
    env = render(load_recipe("gpt2_z2")).env
    assert env[SPEED_ENV].split(",") == [s.name for s in SWITCHES if s.equal]
    off = render(load_recipe("gpt2_z2", ["speed.eager_elementwise=false", "speed.compiled_elementwise=true"]))
    assert "eager_elementwise" not in off.env[SPEED_ENV].split(",")
    assert "compiled_elementwise" in off.env[SPEED_ENV].split(",")
    none = render(load_recipe("gpt2_z2", [f"speed.{name}=false" for name in SWITCH_NAMES]))
    assert SPEED_ENV not in none.env
    assert SPEED_ENV not in render(load_recipe("finetune/gpt2_xl_mrpc_z2")).env


def test_an_inherited_speed_variable_never_reaches_a_launch():
    launch = render(load_recipe("gpt2_z2", [f"speed.{name}=false" for name in SWITCH_NAMES]))
    assert SPEED_ENV not in launch.process_env({SPEED_ENV: "manual_gc", "HOME": "/x"})


def test_a_misspelt_switch_is_refused_with_the_names(monkeypatch):
    monkeypatch.setenv(SPEED_ENV, "manual_gc,sync_free_zero")
    with pytest.raises(ValueError, match="no speed switch sync_free_zero; the switches: unsynced"):
        launch_switches()
    with pytest.raises(ValueError, match="no speed switch warp"):
        set_on({"warp"})


def test_the_entry_refuses_a_misspelt_switch_before_training(tmp_path):
    result = run_entry(tmp_path, ZEROLAB_SPEED="eager_elementwise,turbo")
    assert result.returncode != 0
    assert "ZEROLAB_SPEED='eager_elementwise,turbo': no speed switch turbo" in result.stderr


def test_each_switch_is_a_launch_patch_explained_in_one_line():
    switches = [patch for patch in LAUNCH_PATCHES if patch.kind == "switch"]
    assert [patch.name for patch in switches] == list(SWITCH_NAMES)
    for patch in switches:
        assert patch.why and "\n" not in patch.why and len(patch.why) < 110
    os.environ.pop(SPEED_ENV, None)
    assert not any(patch.wanted() for patch in switches)
