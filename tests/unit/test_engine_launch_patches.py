"""The opt-in patches a launch asks for by environment variable (rank/sdpa_attention.py,
rank/step_profile.py), applied by megatron_entry beside the workarounds: only when asked, printed
as `zerolab: patch NAME`, refused when malformed. On the real engine:
tests/engine/test_engine_launch_patches_real.py."""

from __future__ import annotations

import importlib.util

import pytest
from engine_patch_helpers import run_entry, run_with_standins


def test_opt_in_patches_apply_only_when_their_variable_asks(tmp_path):
    code = 'print([w.name for w in applied if w.name in ("sdpa_attention", "profile_training_steps")])'
    assert run_with_standins(tmp_path / "plain", code).strip() == "[]"
    sdpa = run_with_standins(tmp_path / "sdpa", code, ZEROLAB_ATTENTION="sdpa")
    assert sdpa.strip() == "['sdpa_attention']"
    profiled = run_with_standins(tmp_path / "profile", code, ZEROLAB_PROFILE_DIR=str(tmp_path / "p"))
    assert profiled.strip() == "['profile_training_steps']"


def test_entry_prints_the_attention_patch_only_when_active(tmp_path):
    plain, sdpa = run_entry(tmp_path), run_entry(tmp_path, ZEROLAB_ATTENTION="sdpa")
    assert plain.returncode == sdpa.returncode == 0
    assert "zerolab: patch sdpa_attention" not in plain.stdout
    assert "zerolab: patch sdpa_attention: CoreAttention computed by PyTorch's" in sdpa.stdout
    assert plain.stdout.endswith("trained\n") and sdpa.stdout.endswith("trained\n")


def test_entry_refuses_a_malformed_variable_before_training(tmp_path):
    unknown = run_entry(tmp_path, ZEROLAB_ATTENTION="flash")
    assert unknown.returncode == 1 and "trained" not in unknown.stdout
    assert "ZEROLAB_ATTENTION='flash': zerolab knows only 'sdpa'" in unknown.stderr
    steps = run_entry(tmp_path, ZEROLAB_PROFILE_DIR=str(tmp_path), ZEROLAB_PROFILE_STEPS="5,3")
    assert steps.returncode == 1 and "ZEROLAB_PROFILE_STEPS='5,3'" in steps.stderr
    probe = run_entry(tmp_path, ZEROLAB_FORWARD_PROBE=str(tmp_path / "nowhere"))
    assert probe.returncode == 1 and "trained" not in probe.stdout
    assert "no tokens.json there to run the model on" in probe.stderr


def test_entry_names_the_missing_flash_attn_package(tmp_path):
    if importlib.util.find_spec("flash_attn") is not None:
        pytest.skip("flash_attn is installed in this Python")
    result = run_entry(tmp_path, "--use-flash-attn-v2")
    assert result.returncode == 1 and "trained" not in result.stdout
    assert "needs the flash_attn package" in result.stderr and "model.attention=sdpa" in result.stderr
