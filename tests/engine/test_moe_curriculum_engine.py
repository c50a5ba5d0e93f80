"""Mixture of experts (the moe section) and DeepSpeed's sequence-length curriculum (the curriculum
section) train on the real engine: one short launch each of the tiny model on 2 CPU ranks over gloo.
Their checks and renders: tests/unit/test_recipe_bad.py and test_recipe_render.py."""

from __future__ import annotations

from engine_runs import train

EXPERTS = [
    "moe.num_experts=4",
    "moe.expert_parallel=2",  # two experts a rank, the tokens exchanged all-to-all over gloo
    "moe.topk=2",
    "moe.mlp_type=residual",
    "moe.train_capacity_factor=2.0",
    "moe.min_capacity=2",
    "moe.loss_coeff=0.01",
    "moe.param_group=true",  # ZeRO-1 reduces the experts over their own groups
]


def test_experts_train_under_zero_1_with_expert_parallelism(engine, dataset, tmp_path):
    run = train(dataset, tmp_path / "run", "cpu/tiny_z1", *EXPERTS, "train.save_interval=null")

    args = run.args
    assert (args["num_experts"], args["moe_expert_parallel_size"], args["topk"]) == ("[4]", 2, 2)
    assert (args["mlp_type"], args["moe_train_capacity_factor"], args["moe_min_capacity"]) == (
        "residual",
        2.0,
        2,
    )
    assert args["moe_loss_coeff"] == 0.01 and args["create_moe_param_group"] is True
    # the tiny model (hidden 64, MLP 256, vocabulary padded to 50,304, 128 positions): its second layer is
    # the MoE layer (one in moe.expert_interval, Megatron's 2), whose MLP each rank holds as 2 of the 4
    # experts, PR-MoE's dense MLP beside them, the gate (4 logits, no bias) and the mixing coefficient
    hidden, ffn = 64, 256
    mlp = 2 * hidden * ffn + ffn + hidden
    layer = 4 * hidden + (3 * hidden * hidden + 3 * hidden) + (hidden * hidden + hidden) + mlp
    dense = 50304 * hidden + 128 * hidden + 2 * layer + 2 * hidden
    experts = dense - mlp + 2 * mlp + mlp + hidden * 4 + (hidden * 2 + 2)
    assert f"model parallel rank (0, 0): {experts}\n" in run.text
    assert run.text.count("moe loss:") >= 3  # the gates' balancing loss, each iteration
    assert len(run.losses) == 3  # each finite (train checks it)


def test_a_curriculum_trains_its_lengths(engine, dataset, tmp_path):
    # from 32 to 128 tokens over 4 iterations, multiples of 8: DeepSpeed's fixed_linear gives iteration
    # i the length 32 + i / 4 x (128 - 32), rounded down to a multiple of 8: 56, 80, 104
    curriculum = ["curriculum.enabled=true", "curriculum.min_seq_length=32", "curriculum.steps=4"]
    run = train(
        dataset,
        tmp_path / "run",
        "cpu/tiny_z1",
        *curriculum,
        "model.seq_length=128",
        "train.save_interval=null",
    )

    # without the pipeline engine, DeepSpeed's engine hands the model each step's length
    assert run.args["no_pipeline_parallel"] is True and run.ds["curriculum_enabled_legacy"] in (True, "True")
    assert list(run.log.iterations["seq_length"]) == [56, 80, 104]
    assert "consumed tokens:          448 " in run.text  # 8 sequences of 56 tokens at iteration 1
    assert len(run.losses) == 3
