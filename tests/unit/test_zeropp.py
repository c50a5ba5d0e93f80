"""ZeRO++ (hpZ, qwZ, qgZ) and MiCS as ZeRO setups: the zero keys render into the ds_config at stage 3,
each checked before launch with why (hpZ within a node, MiCS shards dividing the data-parallel
ranks, hierarchical gather only across nodes, qwZ/qgZ only where they act), named as setups in
sweeps and summaries, and MiCS's launch workarounds asked for by the launch's own config. Trained
on the engine: tests/engine/test_zeropp_engine.py."""

from __future__ import annotations

import json

import pytest
from prep_helpers import SAMPLE

from zerolab.cli import main
from zerolab.engine.doctor import zeropp_quantizer_row
from zerolab.errors import UserError
from zerolab.estimate import estimate
from zerolab.estimate.communication import ring, step_traffic
from zerolab.estimate.parts import STEP
from zerolab.rank.workarounds import launch_ds_config, mics_asked
from zerolab.recipe.compose import load_recipe
from zerolab.recipe.output import zero_label
from zerolab.recipe.render import render
from zerolab.recipe.setups import zero_setup, zero_variant

TWO_NODES = [
    "hardware.nodes=2",
    "hardware.launcher=deepspeed",
    "hardware.hostfile=hostfile",
    "hardware.master_addr=node0",
]


def _zero(recipe: str, *overrides: str) -> dict:
    return render(load_recipe(recipe, list(overrides))).ds_config["zero_optimization"]


def test_each_block_renders_its_deepspeed_keys_and_is_named_as_a_setup():
    assert _zero("cpu/tiny_z3_hpz")["zero_hpz_partition_size"] == 2
    assert _zero("cpu/tiny_z3_mics")["mics_shard_size"] == 2
    full = _zero("gpt2_z3", "zero=z3_zeropp", *TWO_NODES)
    assert (
        full["zero_hpz_partition_size"],
        full["zero_quantized_weights"],
        full["zero_quantized_gradients"],
    ) == (
        2,
        True,
        True,
    )
    names = {}
    for recipe, overrides in (
        ("cpu/tiny_z3_hpz", []),
        ("cpu/tiny_z3_mics", []),
        ("gpt2_z3", ["zero=z3_zeropp", *TWO_NODES]),
    ):
        zero = load_recipe(recipe, overrides).zero
        names[zero_setup(zero.stage, zero.offload_optimizer, zero.offload_param, **zero_variant(zero))] = (
            zero_label(load_recipe(recipe, overrides))
        )
    assert names == {
        "z3_hpz": "ZeRO 3 + hpZ 2",
        "z3_mics": "ZeRO 3 + MiCS 2",
        "z3_zeropp": "ZeRO 3 + hpZ 2 + qwZ + qgZ",
    }
    assert "zero_hpz_partition_size" not in _zero("cpu/tiny_z3") and "mics_shard_size" not in _zero(
        "cpu/tiny_z3"
    )


@pytest.mark.parametrize(
    ("recipe", "overrides", "said"),
    [
        (
            "cpu/tiny_z2",
            ["zero.hpz_partition_size=2"],
            "hpz_partition_size: DeepSpeed reads these at ZeRO stage 3 only",
        ),
        ("cpu/tiny_z3", ["zero.hpz_partition_size=4"], "hpZ partition 4 must divide the ranks of a node (2)"),
        ("cpu/tiny_z3", ["zero.mics_shard_size=4"], "MiCS shard 4 must divide the data-parallel ranks (2)"),
        (
            "cpu/tiny_z3_mics",
            ["zero.mics_hierarchical_params_gather=true"],
            "DeepSpeed asserts 'sharding spans on single node, no need for hierarchy allgather'",
        ),
        ("cpu/tiny_z3", ["zero.quantized_weights=true"], "DeepSpeed's CUDA quantizer op (QuantizerBuilder)"),
        (
            "gpt2_z3",
            ["zero=z3_zeropp"],
            "qgZ on one node: DeepSpeed's ZeRO-3 takes the quantized reduce only across nodes",
        ),
    ],
)
def test_what_cannot_act_is_refused_before_launch_saying_why(recipe, overrides, said, capsys):
    with pytest.raises(UserError, match=None) as refused:
        load_recipe(recipe, overrides)
    assert said in str(refused.value)
    assert main(["render", recipe, *overrides]) == 2


def test_a_sweep_compares_them_with_zero3(tmp_path, capsys):
    out = tmp_path / "dolly"
    assert main(["prep", "dolly", "--input", str(SAMPLE), "--out", str(out), "--quiet"]) == 0
    capsys.readouterr()
    sweep = ["sweep", "cpu/tiny_dp", "zero=z3,z3_hpz,z3_mics", f"data.path={out}_text_document", "--dry-run"]
    assert main(sweep) == 0
    said = capsys.readouterr().out
    assert (
        all(f"zero-{setup}" in said for setup in ("z3", "z3_hpz", "z3_mics"))
        and "would run 3 cell(s)" in said
    )


def test_mics_workarounds_are_asked_for_by_the_launchs_own_config(tmp_path):
    config = tmp_path / "ds_config.json"
    config.write_text(json.dumps({"zero_optimization": {"stage": 3, "mics_shard_size": 2}}))
    assert (
        launch_ds_config(["pretrain_gpt.py", "--deepspeed_config", str(config)])["zero_optimization"]["stage"]
        == 3
    )
    assert launch_ds_config(["pretrain_gpt.py", "--deepspeed_config", str(tmp_path / "none.json")]) == {}
    assert not mics_asked()  # this process names no config


def _estimate(*overrides: str):
    return estimate(load_recipe("gpt2_z3", ["hardware.procs_per_node=8", *overrides]))


def test_the_estimate_counts_hpzs_secondary_partition_and_mics_shards():
    plain, hpz, mics = (
        _estimate(),
        _estimate("zero.hpz_partition_size=8"),
        _estimate("zero.mics_shard_size=4"),
    )
    psi = plain.peak_stage.stage.params
    secondary = {part.key: part.bytes for part in hpz.peak_stage.parts}["hpz_partition"]
    assert secondary == pytest.approx(2 * psi / 8)  # bf16 weights over the node's 8 ranks

    def states(est):
        keys = ("weights", "gradients", "master_weights", "optimizer_states")
        return sum(p.bytes for p in est.peak_stage.parts if p.key in keys and STEP in p.phases)

    assert states(plain) == pytest.approx(16 * psi / 8) and states(mics) == pytest.approx(16 * psi / 4)


def test_the_traffic_of_hpz_qwz_qgz_and_mics():
    plain = _estimate()
    shape, stage = plain.shape, plain.peak_stage.stage
    weights = 2 * stage.params
    micro = shape.accumulation
    base = step_traffic(plain.recipe, shape, stage)
    assert base.all_gather == pytest.approx(micro * 2 * ring(weights, 8))
    two_nodes = [
        "hardware.nodes=2",
        "hardware.launcher=deepspeed",
        "hardware.hostfile=h",
        "hardware.master_addr=n0",
        "train.global_batch_size=64",
    ]
    for overrides, gather_factor, reduce_factor in (
        (["zero.hpz_partition_size=8"], 1.0, 1.0),
        (["zero=z3_zeropp", "zero.hpz_partition_size=8", *two_nodes], 0.5, 0.25),
    ):
        est = _estimate(*overrides)
        moved, n = step_traffic(est.recipe, est.shape, est.peak_stage.stage), est.shape.zero_ranks
        w = est.peak_stage.stage.params * 2 * gather_factor
        assert moved.all_gather == pytest.approx(est.shape.accumulation * (ring(w, n) + ring(w, 8)))
        assert moved.reduce_scatter == pytest.approx(
            est.shape.accumulation * ring(est.peak_stage.stage.params * 2 * reduce_factor, n)
        )
    mics = _estimate("zero.mics_shard_size=4")
    moved = step_traffic(mics.recipe, mics.shape, mics.peak_stage.stage)
    assert moved.all_reduce == pytest.approx(2 * ring(weights / 4, 2))  # across the 2 replicas of a shard


def test_doctor_says_whether_the_machine_can_run_qwz_and_qgz():
    assert zeropp_quantizer_row({"accelerator": "cpu", "ops": {}}).startswith(
        "no: the cpu accelerator has no"
    )
    cuda = {
        "accelerator": "cuda",
        "ops": {"quantizer": {"installed": False, "jit_built": False, "compatible": True}},
    }
    assert zeropp_quantizer_row(cuda) == "yes: the quantizer op is compatible (built on first use)"
    cuda["ops"]["quantizer"]["compatible"] = False
    assert zeropp_quantizer_row(cuda).startswith("no: DeepSpeed's quantizer op is not compatible")
