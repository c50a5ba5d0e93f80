"""The estimate of the second engine (engine fsdp2): the FSDP2 loop's bytes per weight, what each
setup keeps gathered, what CPUOffloadPolicy puts on the host, and its collectives per step."""

from __future__ import annotations

import pytest

from zerolab.cli import main
from zerolab.estimate import estimate
from zerolab.estimate.communication import step_traffic
from zerolab.estimate.parts import BACKWARD, STEP
from zerolab.recipe.compose import load_recipe

SHARDED = ("weights", "gradients", "optimizer_states", "step")


def _estimate(setup: str, *overrides: str):
    """The estimate of the GPU recipe gpt2_fsdp2_SETUP (GPT-2 1.5B, 2 GPUs, bf16)."""
    return estimate(load_recipe(f"gpt2_fsdp2_{setup}", list(overrides)))


def _bytes(est, keys, phase=STEP) -> float:
    return sum(p.bytes for p in est.peak_stage.parts if p.key in keys and phase in p.phases)


@pytest.mark.parametrize("ranks", [2, 8])
def test_ddp_holds_24_bytes_a_weight_at_the_step_and_fully_shard_20_over_n(ranks):
    """DDP: fp32 weights, gradients, its buckets, AdamW's two moments, one foreach temporary;
    fully_shard: the same less the buckets, each a 1/N shard."""
    ddp = _estimate("dp", f"hardware.procs_per_node={ranks}")
    psi = ddp.peak_stage.stage.params
    assert _bytes(ddp, (*SHARDED, "buckets")) == pytest.approx(24 * psi)
    z3 = _estimate("z3", f"hardware.procs_per_node={ranks}")
    assert _bytes(z3, SHARDED) == pytest.approx(20 * psi / ranks)


def test_sharding_orders_the_peaks_and_z3_gathers_less_than_z2():
    peak = {setup: _estimate(setup).gpu_peak_gib for setup in ("dp", "z2", "z3", "z3_offload")}
    assert peak["dp"] > peak["z2"] > peak["z3"] > peak["z3_offload"]
    z2, z3 = _estimate("z2"), _estimate("z3")
    assert _bytes(z3, ("gathered_weights",), BACKWARD) < _bytes(z2, ("gathered_weights",), BACKWARD) / 4


def test_cpu_offload_puts_the_shards_and_the_step_on_the_host():
    est = _estimate("z3_offload")
    assert {part.key for part in est.peak_stage.host_parts()} == set(SHARDED)
    assert not any(part.key in SHARDED for part in est.peak_stage.gpu_parts())
    assert est.host_peak_phase == STEP


def test_bf16_gathers_half_the_bytes_of_fp32():
    fp32 = _estimate("z2", "precision=fp32")
    bf16 = _estimate("z2")
    assert bf16.recipe.precision_name == "bf16"
    gathered = ("gathered_weights",)
    assert _bytes(bf16, gathered, BACKWARD) == pytest.approx(_bytes(fp32, gathered, BACKWARD) / 2)


def test_traffic_all_reduces_for_ddp_and_gathers_twice_per_layer_with_reshard():
    ddp, z2, z3 = (_estimate(setup, "precision=fp32") for setup in ("dp", "z2", "z3"))
    shape, stage = ddp.shape, ddp.peak_stage.stage
    ring = (shape.zero_ranks - 1) / shape.zero_ranks
    micro = shape.accumulation
    assert step_traffic(ddp.recipe, shape, stage).all_reduce == pytest.approx(
        micro * 2 * ring * 4 * stage.params
    )
    two, three = step_traffic(z2.recipe, shape, stage), step_traffic(z3.recipe, shape, stage)
    assert two.all_reduce == three.all_reduce == 0
    assert two.reduce_scatter == three.reduce_scatter == pytest.approx(micro * ring * 4 * stage.params)
    layers = stage.layers * shape.layer_params()
    assert three.all_gather - two.all_gather == pytest.approx(micro * ring * 4 * layers)


def test_zerolab_estimate_prints_an_fsdp2_recipe(capsys):
    assert main(["estimate", "cpu/tiny_fsdp2_z3"]) == 0
    out = capsys.readouterr().out
    assert "gradient shard (fp32)" in out and "unsharded weights" in out
