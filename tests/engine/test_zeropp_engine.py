"""ZeRO++'s hpZ and MiCS on the real engine, CPU, 2 ranks over gloo, fp32: recipes/cpu/tiny_z3_hpz and
tiny_z3_mics train the losses of recipes/cpu/tiny_z3 at each of 20 iterations (on one node of 2 ranks
hpZ's secondary partition and MiCS's one shard are the whole world: the same computation, through
DeepSpeed's hpZ and MiCS code paths and zerolab's MiCS workarounds), resume from their own checkpoints
to the losses of a run that never stopped, and export the weights the ZeRO-3 run's export has. Across
two nodes: tests/cluster/test_cluster.py. The keys' checks: tests/unit/test_zeropp.py."""

from __future__ import annotations

import pytest
from engine_runs import Trained, same_losses, train

from zerolab.cli import main
from zerolab.evaluate.same_weights import differences_from_first
from zerolab.logs.parse import parse_log

ITERS = 20
RUN = [f"train.iters={ITERS}", "train.log_interval=1", f"train.save_interval={ITERS}", "model.seq_length=32"]
SETUPS = ("cpu/tiny_z3", "cpu/tiny_z3_hpz", "cpu/tiny_z3_mics")
CONSTANT = [
    "train.lr_decay_style=constant",
    "train.lr_warmup_iters=2",
    "train.log_interval=1",
    "model.seq_length=32",
]


@pytest.fixture(scope="module")
def runs(dataset, tmp_path_factory) -> dict[str, Trained]:
    """Each setup trained 20 iterations from the seed's random weights, saved at the end."""
    folder = tmp_path_factory.mktemp("zeropp")
    return {
        recipe: train(dataset, folder / recipe.split("/")[1], recipe, *RUN, short=False) for recipe in SETUPS
    }


@pytest.mark.parametrize("recipe", SETUPS[1:])
def test_hpz_and_mics_train_the_losses_of_zero3(runs, recipe):
    zero3, variant = runs["cpu/tiny_z3"], runs[recipe]
    assert len(variant.losses) == ITERS and same_losses(zero3, variant, 1e-4), (zero3.losses, variant.losses)
    assert zero3.losses[-1] < zero3.losses[0] - 0.3  # it trained
    zero = str(variant.ds["zero_config"])  # as DeepSpeed resolved and printed it
    if recipe.endswith("hpz"):
        assert "zero_hpz_partition_size=2" in zero
    else:
        assert (
            "mics_shard_size=2" in zero and "zerolab: workaround model_built_under_mics_init" in variant.text
        )


def test_their_exports_are_the_zero3_runs(runs, tmp_path):
    folders = []
    for recipe in SETUPS:
        out = tmp_path / recipe.split("/")[1]
        assert main(["export", str(runs[recipe].run_dir), "--out", str(out)]) == 0
        folders.append(out)
    differences = differences_from_first(folders)
    assert max(differences) < 1e-4, differences


@pytest.mark.parametrize("recipe", SETUPS[1:])
def test_a_run_resumed_from_its_own_checkpoint_trains_on_as_one_that_never_stopped(dataset, tmp_path, recipe):
    first = train(
        dataset, tmp_path / "first", recipe, *CONSTANT, "train.iters=6", "train.save_interval=6", short=False
    )
    assert (first.run_dir / "checkpoints" / "latest_checkpointed_iteration.txt").read_text().strip() == "6"
    resumed = tmp_path / "resumed"
    assert main(["launch", "--resume", str(first.run_dir), "train.iters=12", "--run-dir", str(resumed)]) == 0
    assert "successfully loaded checkpoint" in (resumed / "train.log").read_text()
    whole = train(
        dataset,
        tmp_path / "whole",
        recipe,
        *CONSTANT,
        "train.iters=12",
        "train.save_interval=null",
        short=False,
    )
    continued = list(parse_log(resumed / "train.log").iterations["loss"])
    assert continued == pytest.approx(whole.losses[6:], abs=1e-5)
