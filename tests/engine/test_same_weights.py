"""Whether two Hugging Face GPT-2 folders hold the same weights (zerolab.evaluate.same_weights):
how the CPU demo knows that its five setups' checkpoints are one model, to score it once. The
demo's use of it on a real sweep: tests/engine/test_sweep_engine.py. Skipped, with the reason, without
the engine."""

from __future__ import annotations

import math
import shutil

from engine_patch_helpers import run_on_engine

from zerolab.evaluate.same_weights import differences_from_first
from zerolab.rundir import SAME_WEIGHTS


def test_a_copy_is_the_same_model_and_a_nudged_one_is_not(engine, hf_model, tmp_path):
    copy, nudged, other_shape = tmp_path / "copy", tmp_path / "nudged", tmp_path / "other"
    for folder in (copy, nudged, other_shape):
        shutil.copytree(hf_model, folder)
    run_on_engine(
        engine,
        f"""
        from safetensors.torch import load_file, save_file
        weights = load_file({str(nudged / "model.safetensors")!r})
        weights["transformer.h.1.mlp.c_fc.bias"][3] += 1e-3
        save_file(weights, {str(nudged / "model.safetensors")!r}, metadata={{"format": "pt"}})
        weights["transformer.wpe.weight"] = weights["transformer.wpe.weight"][:64].clone()
        save_file(weights, {str(other_shape / "model.safetensors")!r}, metadata={{"format": "pt"}})
        """,
    )
    first, same, near, far = differences_from_first([hf_model, copy, nudged, other_shape])
    assert first == 0.0 and same == 0.0
    assert SAME_WEIGHTS < near < 2e-3 and math.isinf(far)
