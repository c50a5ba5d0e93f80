"""The sample-based length, the batch-size ramp-up, the token budget and the token-based
learning-rate schedule (train.samples, rampup_batch_size, max_tokens, lr_warmup_tokens,
lr_decay_tokens), a weighted blend of datasets (data.path `W1 PREFIX1 W2 PREFIX2`), rotary
position embeddings (model.rotary), gradients divided before their reduction
(train.prescale_gradients), the TensorBoard, time-limit and dataset-reading options upstream's
scripts pass (logging.tensorboard_queue_size, log_batch_size, log_optimizer_states,
train.exit_duration_mins, data.impl) and DeepSpeed-Ulysses sequence parallelism (parallel.sequence) train on
the real engine: one short launch proves all but the last, one more the ninth against the shared run
it splits differently. A third, in bf16 under ZeRO-1, proves the other options upstream's scripts
set: fp32 gradient accumulation (precision.grad_accum_dtype), the iteration exit (train.exit_interval,
which the token budget above would hide), the rotary fraction and base (model.rotary_percent,
rotary_theta), Megatron's timers (logging.timing_log_level), DeepSpeed's flops profiler
(logging.flops_profiler_step, flops_profiler_top_modules) and PyTorch's softmax
(model.masked_softmax_fusion). A fourth offloads part of ZeRO-3's optimizer (zero.offload_ratio)."""

from __future__ import annotations

import math
import re

from engine_runs import same_losses, train

from zerolab.recipe.compose import load_recipe
from zerolab.recipe.job import train_iters

# tiny_z1: global batch 8 = micro 2 x data parallel 2 x 2; sequences of 128 tokens. The ramp [4, 4, 8]
# trains batches of 4, 4, 8 (16 samples, 2,048 tokens) while at most 8 samples are consumed, then
# (24 - 16) // 8 = 1 more: 4 iterations, which the budget of 2,048 tokens cuts to 3
SCHEDULE = [
    "train.iters=null",
    "train.samples=24",
    "train.rampup_batch_size=[4,4,8]",
    "train.max_tokens=2048",
    "train.lr_warmup_iters=0",
    "train.lr_warmup_tokens=512",
    "train.lr_decay_tokens=1536",
    "train.log_interval=1",
    "model.rotary=true",
    "train.prescale_gradients=true",
    "logging.tensorboard=true",
    "logging.tensorboard_queue_size=1",
    "logging.log_batch_size=true",
    "logging.log_optimizer_states=true",
    "train.exit_duration_mins=100000",
    "data.impl=mmap",
]


def test_samples_ramp_up_token_budget_and_token_schedule_train_as_rendered(engine, dataset, tmp_path):
    blended = f"data.path=0.25 {dataset} 0.75 {dataset}"
    recipe = load_recipe("cpu/tiny_z1", [blended, *SCHEDULE])
    assert train_iters(recipe) == 4

    run = train(dataset, tmp_path / "run", "cpu/tiny_z1", blended, *SCHEDULE, short=False, stops_at=3)

    assert run.args["use_rotary_position_embeddings"] is True
    assert (run.args["tensorboard_queue_size"], run.args["exit_duration_in_mins"], run.args["data_impl"]) == (
        1,
        100000,
        "mmap",
    )
    assert (
        run.args["log_batch_size_to_tensorboard"] is run.args["log_optimizer_states_to_tensorboard"] is True
    )
    assert list((run.run_dir / "tensorboard").iterdir())  # the events written
    assert run.ds["prescale_gradients"] in (True, "True")
    assert run.args["data_path"] == str(["0.25", dataset, "0.75", dataset])  # a list: one word each
    assert "> building indices for blendable datasets" in run.text
    assert run.args["train_samples"] == 24 and run.log.train_iters == 4  # cut to 3 by the budget
    assert run.args["train_tokens"] == 2048
    assert (run.args["lr_warmup_tokens"], run.args["lr_decay_tokens"]) == (512, 1536)
    assert list(run.log.iterations["global_batch_size"]) == [4, 4, 8]
    lrs = [float(value) for value in re.findall(r"learning rate: ([\d.eE+-]+)", run.text)]
    peak, low = recipe.train.lr, recipe.train.min_lr
    # each iteration logs the rate it trained at, the schedule at the tokens consumed before it: 0
    # (the warm-up's start), 512 (its end: the peak), 1,024 (half way through the cosine decay over
    # 1,536 - 512 tokens)
    half = low + (peak - low) * 0.5 * (math.cos(math.pi * 0.5) + 1)
    wanted = [0.0, peak, half]
    assert len(lrs) == 3, lrs
    assert all(math.isclose(a, b, rel_tol=1e-3, abs_tol=1e-12) for a, b in zip(lrs, wanted, strict=True)), lrs


def test_ulysses_sequence_parallelism_trains_the_losses_of_data_parallelism(
    engine, dataset, trained, tmp_path
):
    # tiny_z1 on 2 ranks with each sequence split across both: data parallel 1, so the global batch
    # of 8 is micro 2 x 4 micro batches on each rank. The shared z1 run trains the same batches data
    # parallel 2: the same samples, weights and arithmetic, split otherwise
    run = train(dataset, tmp_path / "run", "cpu/tiny_z1", "parallel.sequence=2")

    assert run.args["ds_sequence_parallel_size"] == 2 and run.args["data_parallel_size"] == 1
    assert run.ds["train_batch_size"] == 8 and run.ds["gradient_accumulation_steps"] == 4
    assert "zerolab: workaround ulysses_batch_dimension" in run.text
    z1 = trained("z1")
    assert same_losses(run, z1, 1e-4), (run.losses, z1.losses)


UPSTREAM_OPTIONS = [
    "train.iters=4",
    "train.lr_warmup_iters=1",
    "train.log_interval=1",
    "precision=bf16",
    "model.seq_length=32",  # bf16 on a CPU without bf16 instructions: tests/engine/test_engine_matrix.py
    "precision.grad_accum_dtype=fp32",
    "train.exit_interval=3",
    "model.rotary=true",
    "model.rotary_percent=0.5",
    "model.rotary_theta=500000",
    "logging.timing_log_level=2",
    "logging.flops_profiler_step=1",
    "logging.flops_profiler_top_modules=2",
    "model.masked_softmax_fusion=false",
]


def test_the_options_upstream_scripts_set_train_as_rendered(engine, dataset, tmp_path):
    run = train(dataset, tmp_path / "run", "cpu/tiny_z1", *UPSTREAM_OPTIONS, short=False, stops_at=3)

    assert (run.args["rotary_percent"], run.args["rope_theta"]) == (0.5, 500000)
    assert (run.args["timing_log_level"], run.args["exit_interval"]) == (2, 3)
    assert "exiting program at iteration 3" in run.text and run.log.train_iters == 4  # 3 of 4 trained
    assert run.ds["grad_accum_dtype"] == "fp32"
    assert "DeepSpeed Final Optimizer = BF16_Optimizer" in run.text  # fp32 accumulation of bf16
    assert "    batch-generator ...." in run.text  # a level-2 timer (pretrain_gpt.py forward_step)
    # DeepSpeed counts its steps from 0: step 1 is the second iteration, its profile printed once
    assert run.text.count("Profile Summary at step 2:") == 1
    assert run.args["masked_softmax_fusion"] is False


def test_a_partial_optimizer_offload_trains_and_on_cpu_steps_every_group_there(
    engine, dataset, trained, tmp_path
):
    run = train(dataset, tmp_path / "run", "cpu/tiny_z3_offload", "zero.offload_ratio=0.5")

    assert "ratio=0.5" in str(run.ds["zero_config"])
    # DeepSpeed steps a sub-group "on the GPU" by torch's AdamW where it is not offloaded; on CPU the
    # accelerator is the CPU, every sub-group goes to CPU Adam: the losses of the whole offload
    offloaded = trained("z3_offload")
    assert same_losses(run, offloaded, 1e-6), (run.losses, offloaded.losses)
