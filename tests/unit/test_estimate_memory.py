"""The estimate's terms: parameter counts against the engine's own, the ZeRO paper's bytes per
parameter, Korthikanti's activations, recompute, pipeline schedules, buckets, offload, traffic,
and what it refuses to model."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest

from zerolab.estimate import CannotEstimate, estimate
from zerolab.estimate.activations import layer_activations, stage_activations
from zerolab.estimate.communication import step_traffic
from zerolab.estimate.fit import DOES_NOT_FIT, FITS, INVALID, TIGHT, fit_status, fit_table
from zerolab.estimate.from_log import recipe_from_log
from zerolab.estimate.parts import FORWARD, GIB, STEP
from zerolab.estimate.shape import Shape
from zerolab.logs.parse import parse_log
from zerolab.recipe.compose import load_recipe

LOGS = Path(__file__).parents[1] / "fixtures" / "logs"
STATES = ("weights", "gradients", "master_weights", "optimizer_states")
ONE_GPU_124M = ("model=gpt2-124m", "hardware.procs_per_node=1", "activation_checkpointing=none")


def _recipe(name: str, *overrides: str):
    return load_recipe(name, list(overrides))


def _gpu_states_bytes(est, phase=STEP) -> float:
    parts = est.peak_stage.parts
    return sum(p.bytes for p in parts if p.key in STATES and not p.host and phase in p.phases)


def test_parameter_counts_match_the_engine():
    """Megatron prints the tiny model's count; DeepSpeed's pipeline engine prints each stage's."""
    tiny = Shape.of(_recipe("cpu/tiny_dp"))
    printed = re.search(
        r"model parallel rank \(0, 0\): (\d+)", (LOGS / "cpu-engine" / "final_z0.log").read_text()
    )
    assert tiny.stages()[0].params == int(printed.group(1))
    assert Shape.of(_recipe("gpt2_dp", "model=gpt2-124m")).total_params() == 124_475_904
    log = (LOGS / "real" / "megatronds_2021-meg24-3d-pp16-full-run.log").read_text()
    stage_params = {
        int(s): int(p) for s, p in re.findall(r"STAGE=(\d+) LAYERS=\d+ \[[^]]*\) STAGE_PARAMS=(\d+)", log)
    }
    recipe, _ = recipe_from_log(parse_log(LOGS / "real" / "megatronds_2021-meg24-3d-pp16-full-run.log"))
    assert recipe is not None
    shape = Shape.of(recipe)
    assert {s.index: s.params for s in shape.stages() if s.index in stage_params} == stage_params


@pytest.mark.parametrize(
    ("setup", "bytes_per_weight"),
    [
        ("z0", lambda n: 16),
        ("z1", lambda n: 4 + 12 / n),
        ("z2", lambda n: 2 + 14 / n),
        ("z3", lambda n: 16 / n),
    ],
)
def test_model_states_are_the_zero_papers_bytes_per_parameter(setup, bytes_per_weight):
    """Mixed precision: 2 + 2 + 12 bytes per weight, partitioned by the stage (ZeRO paper, section 3)."""
    for ranks in (1, 2, 8):
        est = estimate(_recipe("gpt2_dp", f"zero={setup}", f"hardware.procs_per_node={ranks}"))
        psi = est.peak_stage.stage.params
        assert _gpu_states_bytes(est) == pytest.approx(bytes_per_weight(ranks) * psi, rel=1e-9)


def test_fp32_without_zero_holds_16_bytes_and_offload_moves_18_over_n_to_the_host():
    est = estimate(_recipe("cpu/tiny_dp", "hardware.device=cuda"))
    assert _gpu_states_bytes(est) == 16 * est.peak_stage.stage.params
    offload = estimate(_recipe("gpt2_z3_offload"))
    psi, ranks = offload.peak_stage.stage.params, 2
    host = sum(part.bytes for part in offload.peak_stage.host_parts())
    assert host == pytest.approx((2 + 4 + 8 + 4) * psi / ranks)
    assert offload.host_peak_gib() == pytest.approx(ranks * (host / GIB + offload.process_gib()))


def test_activations_are_korthikantis_per_layer_formula():
    """s*b*h*(34 + 5*a*s/h) in 16-bit; s*b*h*(10 + 24/t + 5*a*s/(h*t)) with tensor parallelism."""
    engine_attention = "model.attention=megatron"  # the seq x seq scores are the 5*a*s/h term
    for recipe in (
        _recipe("gpt2_dp", engine_attention),
        _recipe("gpt2_tp2_pp2", engine_attention),
        _recipe("gpt2_dp", "model=gpt2-124m", engine_attention),
    ):
        shape = Shape.of(recipe)
        s, b, h, a, t = shape.seq, shape.micro_batch, shape.hidden, shape.heads, shape.tensor
        expected = s * b * h * (10 + 24 / t + 5 * a * s / (h * t))
        assert layer_activations(shape, 2).total == pytest.approx(expected, rel=1e-9)
    shape = Shape.of(_recipe("gpt2_dp", engine_attention))
    assert layer_activations(replace(shape, attention="flash"), 2).scores == 0
    assert layer_activations(replace(shape, attention="sdpa"), 2).scores == 0
    no_dropout = replace(shape, attention_dropout=0.0, hidden_dropout=0.0)
    scores = 2 * shape.heads * shape.seq * shape.tokens  # the softmax output only
    assert layer_activations(no_dropout, 2).total == 32 * shape.tokens * shape.hidden + scores


def test_recompute_keeps_what_the_setting_says():
    shape = Shape.of(_recipe("gpt2_dp"))
    stage = shape.stages()[0]
    full_layer = layer_activations(shape, 2).total
    sbh = shape.tokens * shape.hidden
    by_setting = {}
    for setting in ("none", "selective", "full"):
        recipe = _recipe("gpt2_dp", f"activation_checkpointing={setting}")
        by_setting[setting] = stage_activations(shape, stage, 2, recipe.activation_checkpointing)
    assert by_setting["none"].kept_per_layer == full_layer
    assert by_setting["selective"].kept_per_layer == 34 * sbh
    assert by_setting["full"].kept_per_layer == 2 * sbh and by_setting["full"].working_set == full_layer
    two = _recipe("gpt2_dp", "activation_checkpointing=full", "activation_checkpointing.num_layers=2")
    chunked = stage_activations(shape, stage, 2, two.activation_checkpointing)
    assert chunked.kept_per_layer == sbh and chunked.working_set == 2 * full_layer


def test_pipeline_stage_keeps_one_micro_batch_per_later_stage():
    """DeepSpeed's 1F1B schedule: stage i holds min(stages - i, micro batches per step)."""
    shape = Shape.of(_recipe("gpt2_tp2_pp2"))
    assert [shape.in_flight(stage) for stage in shape.stages()] == [2, 1]
    one = replace(shape, accumulation=1)
    assert [one.in_flight(stage) for stage in one.stages()] == [1, 1]


def test_zero1_buckets_live_through_the_forward_pass_only_with_accumulation():
    def forward_buckets(*overrides):
        est = estimate(_recipe("gpt2_z1", *ONE_GPU_124M, *overrides))
        return sum(p.bytes for p in est.peak_stage.parts if p.key == "buckets" and FORWARD in p.phases)

    assert forward_buckets() == 2 * 500_000_000 * 2  # 8 micro batches per step
    assert forward_buckets("train.global_batch_size=4") == 0  # one micro batch per step


def test_traffic_is_the_zero_papers_volume():
    """At one micro batch per step, stages 0-2 send 2 Psi (N-1)/N per rank, stage 3 3 Psi (N-1)/N."""
    for setup, factor in (("z0", 2), ("z1", 2), ("z2", 2), ("z3", 3)):
        recipe = _recipe(
            "gpt2_dp", f"zero={setup}", "hardware.procs_per_node=8", "train.global_batch_size=32"
        )
        shape = Shape.of(recipe)
        stage = shape.stages()[0]
        assert shape.accumulation == 1
        traffic = step_traffic(recipe, shape, stage)
        assert traffic.between_gpus == pytest.approx(factor * 2 * stage.params * 7 / 8)
        single = step_traffic(recipe, replace(shape, data=1), stage)
        assert single.between_gpus == 0


def test_fit_statuses_and_invalid_setups():
    assert fit_status(10.0, 80.0) == FITS
    assert fit_status(70.0, 80.0) == TIGHT
    assert fit_status(80.0, 80.0) == DOES_NOT_FIT
    table = fit_table(_recipe("gpt2_tp2_pp2"), 24.0)
    assert table.current == ("z1", 4)
    assert table.cells["z1", 4].status == FITS
    assert table.cells["z2", 4].status == INVALID and "pipeline" in table.cells["z2", 4].reason
    peaks = [table.cells["z0", micro].peak_gib for micro in (1, 2, 4, 8, 16, 32)]
    assert peaks == sorted(peaks), "more micro batch, more memory"


def test_unmodelled_extras_are_refused_by_name_and_neutral_ones_estimated():
    recipe = _recipe(
        "gpt2_z1", "extra.megatron_args=[--swiglu]", "extra.ds_config={sparse_attention: {mode: fixed}}"
    )
    with pytest.raises(CannotEstimate) as error:
        estimate(recipe)
    assert "--swiglu" in str(error.value) and "sparse_attention.mode" in str(error.value)
    neutral = _recipe(
        "gpt2_z1", "extra.megatron_args=[--log-params-norm]", "extra.ds_config={wandb: {enabled: false}}"
    )
    assert estimate(neutral).gpu_peak_gib == estimate(_recipe("gpt2_z1")).gpu_peak_gib


def test_fit_table_drops_stage3_knobs_for_stages_0_to_2():
    table = fit_table(_recipe("gpt2_z3", "zero.prefetch_bucket_size=10000000"), 80.0)
    assert {table.cells[setup, 4].status for setup in ("z0", "z1", "z2", "z3")} <= {FITS, TIGHT, DOES_NOT_FIT}
