"""The second engine proven on the real one: the tiny recipe started from one imported Hugging Face
GPT-2 (`zerolab import`, model.init_from) trains to the same losses at every iteration, and the same
validation losses, under Megatron-DeepSpeed's ZeRO-3 and under FSDP2 z3 (fully_shard, resharded
after forward), under ZeRO-0 and under DDP, and under FSDP2 with CPUOffloadPolicy: the same model,
samples in the engine's order, optimizer and schedule (measured: equal to the printed 1e-5 over 20
iterations). An FSDP2 run resumed from its own checkpoint trains the losses of one that never
stopped. CPU, gloo, 2 ranks, dropout 0, fp32; skipped, with the reason, without the engine. The
render and refusals are tests/unit/test_fsdp2.py's."""

from __future__ import annotations

from pathlib import Path

import pytest
from engine_runs import Trained, same_losses, train

from zerolab.cli import main
from zerolab.logs.parse import parse_log

ITERS = 20
SEQ = 32
"""A short run's context (engine_runs.SEQ_LENGTH): the claim does not depend on it."""
RUN = [
    f"train.iters={ITERS}",
    "train.log_interval=1",
    "train.eval_interval=10",
    "train.save_interval=null",
    f"model.seq_length={SEQ}",
]


@pytest.fixture(scope="module")
def imported(hf_model, tmp_path_factory) -> Path:
    """The tiny Hugging Face GPT-2 imported at one layout, the tiny recipes' padded vocabulary."""
    out = tmp_path_factory.mktemp("fsdp2-import") / "tiny"
    command = ["import", str(hf_model), "--out", str(out), "--make-vocab-size-divisible-by", "128"]
    assert main(command) == 0
    return out


@pytest.fixture(scope="module")
def runs(imported, dataset, tmp_path_factory) -> dict[str, Trained]:
    """Each recipe trained from the imported weights."""
    trained = {}
    for recipe in (
        "cpu/tiny_z3",
        "cpu/tiny_fsdp2_z3",
        "cpu/tiny_dp",
        "cpu/tiny_fsdp2_dp",
        "cpu/tiny_fsdp2_z3_offload",
    ):
        folder = tmp_path_factory.mktemp(recipe.replace("/", "-"))
        trained[recipe] = train(
            dataset, folder / "run", recipe, *RUN, f"model.init_from={imported}", short=False
        )
    return trained


def _validation_losses(run: Trained) -> list[float | None]:
    return [validation.loss for validation in run.log.validations if validation.iteration > 0]


@pytest.mark.parametrize(
    ("megatron", "fsdp2"),
    [
        ("cpu/tiny_z3", "cpu/tiny_fsdp2_z3"),
        ("cpu/tiny_dp", "cpu/tiny_fsdp2_dp"),
        ("cpu/tiny_z3", "cpu/tiny_fsdp2_z3_offload"),
    ],
)
def test_fsdp2_trains_the_losses_of_the_engine(runs, megatron, fsdp2):
    engine, second = runs[megatron], runs[fsdp2]
    assert len(engine.losses) == ITERS
    assert same_losses(engine, second, 1e-4), (engine.losses, second.losses)
    assert engine.losses[-1] < engine.losses[0] - 0.3  # it trained: the loss fell
    validations = _validation_losses(second)
    assert len(validations) == 2
    assert validations == pytest.approx(_validation_losses(engine)[:2], abs=1e-4)


def test_an_fsdp2_run_resumed_from_its_checkpoint_trains_the_losses_of_one_that_never_stopped(
    imported, dataset, tmp_path
):
    constant = ["train.lr_decay_style=constant", "train.lr_warmup_iters=2", f"model.init_from={imported}"]
    saved = ["train.iters=6", "train.save_interval=6"]
    first = train(dataset, tmp_path / "first", "cpu/tiny_fsdp2_z2", *RUN, *constant, *saved, short=False)
    assert (first.run_dir / "checkpoints" / "latest_checkpointed_iteration.txt").read_text().strip() == "6"
    argv = [
        "launch",
        "--resume",
        str(first.run_dir),
        "train.iters=12",
        "--run-dir",
        str(tmp_path / "resumed"),
    ]
    assert main(argv) == 0
    resumed = (tmp_path / "resumed" / "train.log").read_text()
    assert "successfully loaded checkpoint" in resumed
    whole = train(
        dataset, tmp_path / "whole", "cpu/tiny_fsdp2_z2", *RUN, *constant, "train.iters=12", short=False
    )
    continued = list(parse_log(tmp_path / "resumed" / "train.log").iterations["loss"])
    assert continued == pytest.approx(whole.losses[6:], abs=1e-5)
