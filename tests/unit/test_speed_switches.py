"""The speed switches as a recipe sees them: one schema key each, documented from the switch, on
by default when proven equal, rendered into ZEROLAB_SPEED for pretraining only, and a name the
engine does not know refused before any rank trains. Their arithmetic is proven on the engine
(tests/engine/test_speed_engine.py)."""

from __future__ import annotations

import os

import pytest
from engine_patch_helpers import run_entry

from zerolab.contracts import SPEED_ENV, SWITCH_NAMES, SWITCHES, not_used_line, patch_line
from zerolab.logs.parse import parse_log
from zerolab.rank.megatron_entry import LAUNCH_PATCHES
from zerolab.rank.speed_switches import launch_switches, set_on
from zerolab.recipe.compose import load_recipe
from zerolab.recipe.render import render
from zerolab.recipe.schema import SpeedSection
from zerolab.summarize.summary import speed_switches


def test_each_switch_is_a_schema_key_with_its_doc_and_default():
    fields = SpeedSection.model_fields
    assert tuple(fields) == SWITCH_NAMES
    for switch in SWITCHES:
        assert fields[switch.name].description == switch.doc
        assert fields[switch.name].default is switch.equal  # proven equal: on by default
    off = ["compiled_elementwise", "compiled_layers", "coalesced_grad_reduction"]
    assert [s.name for s in SWITCHES if not s.equal] == off
    assert all("off by default" in SpeedSection.model_fields[name].description for name in off)


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


def test_the_summary_names_the_switches_a_run_set_apart_and_those_it_could_not_use(tmp_path):
    """A study reads which runs reduced gradients once per step or ran compiled layers: the summary's
    speed_switches, from the lines the ranks print (contracts' patch_line and not_used_line)."""
    defaults = [switch for switch in SWITCHES if switch.default and switch.name != "manual_gc"]
    lines = [patch_line("switch", switch.name, switch.doc) for switch in defaults]
    lines += [
        patch_line("switch", "compiled_layers", "x"),
        patch_line("switch", "coalesced_grad_reduction", "y"),
    ]
    lines.append(
        not_used_line("coalesced_grad_reduction", "coalesce_grad_reduction requires ZeRO stage 1/2/3")
    )
    log_file = tmp_path / "train.log"
    log_file.write_text("\n".join(lines) + "\n")
    log = parse_log(log_file)
    assert speed_switches(log) == "-manual_gc +compiled_layers +coalesced_grad_reduction (not used)"
    log_file.write_text("\n".join(patch_line("switch", s.name, s.doc) for s in SWITCHES if s.default) + "\n")
    assert speed_switches(parse_log(log_file)) == ""  # the defaults
    log_file.write_text("iteration 1/ 2 | lm loss: 1.0E+01 |\n")
    assert speed_switches(parse_log(log_file)) is None  # a log that names no switch
