"""Every flag family a recipe can render trains on the real engine: a flag is proven by a
training step, not by a parser. Each cell launches the tiny GPT-2 (2 ranks over gloo, CPU) for
three iterations through `zerolab launch`, then checks that the setting reached the engine
(Megatron's argument dump, DeepSpeed's config dump, the files it writes) and what a user relies
on: settings that do not change the arithmetic (ZeRO, recomputation, launchers, accumulation)
train to the same loss. Each shipped GPU recipe, shrunk to the tiny model on this CPU with every
other setting kept, trains too. Skipped, with the reason, when the engine is not set up."""

from __future__ import annotations

from pathlib import Path

import pytest
from engine_runs import SHARED_RUNS, SHORT, Trained, same_losses, train

from zerolab.recipe.compose import load_recipe

pytestmark = pytest.mark.usefixtures(
    "engine"
)  # every test trains: skipped, with the reason, without the engine

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def baseline(trained) -> Trained:
    """Plain data parallelism, fp32, micro batch 2 x accumulation 2 x 2 ranks, no recomputation.
    The module reads every shared run: they are trained first, those no other worker trains first."""
    trained.each(SHARED_RUNS)
    return trained("z0")


@pytest.fixture(scope="module")
def tensor_parallel(trained) -> Trained:
    """Tensor parallel 2 (so data parallel 1), ZeRO 1."""
    return trained("tp2")


def test_plain_data_parallel_evaluates_and_its_loss_falls(baseline):
    assert baseline.args["zero_stage"] == 0 and baseline.args["data_parallel_size"] == 2
    assert baseline.ds["gradient_accumulation_steps"] == 2 and baseline.ds["train_batch_size"] == 8
    assert baseline.log.validations, "the validation at the end of training is missing"
    assert baseline.losses[-1] < baseline.losses[0]


@pytest.mark.parametrize(
    ("setup", "stage", "offloaded"),
    [
        ("z1", 1, ()),
        ("z2", 2, ()),
        ("z3", 3, ()),
        ("z3_offload", 3, ("offload_optimizer",)),
        ("z3_offload_param", 3, ("offload_optimizer", "offload_param")),
    ],
)
def test_zero_stages_train_like_plain_data_parallelism(baseline, trained, setup, stage, offloaded):
    run = trained(setup)
    assert run.args["zero_stage"] == stage and run.ds["zero_optimization_stage"] == stage
    zero_config = run.ds["zero_config"]
    for kind in ("offload_optimizer", "offload_param"):
        on_cpu = (
            f"{kind}=DeepSpeedZeroOffload{'Optimizer' if 'optimizer' in kind else 'Param'}Config(device='cpu'"
        )
        assert (on_cpu in zero_config) == (kind in offloaded), (kind, zero_config)
    if "offload_param" in offloaded:
        assert run.args["remote_device"] == "cpu"
    assert same_losses(run, baseline, 1e-3), (run.losses, baseline.losses)


RECOMPUTE_CASES = {
    "full uniform in chunks of 2": (
        ["activation_checkpointing=full", "activation_checkpointing.num_layers=2"],
        {"recompute_granularity": "full", "recompute_method": "uniform", "recompute_num_layers": 2},
    ),
    "deepspeed in host memory": (
        [
            "activation_checkpointing=full",
            "activation_checkpointing.implementation=deepspeed",
            "activation_checkpointing.cpu_checkpointing=true",
        ],
        {
            "checkpoint_activations": True,
            "deepspeed_activation_checkpointing": True,
            "checkpoint_num_layers": 1,
            "checkpoint_in_cpu": True,
        },
    ),
}
"""Each way of recomputing activations, by the flags it renders (one case per set of flags: a
non-default value covers the default one, host memory adds one flag to DeepSpeed's own). Selective
recomputation trains in the deepspeed launcher's run (test_the_deepspeed_launcher), full recomputation
by blocks in the run at micro batch 1, and full recomputation across pipeline stages in the shared
pp2_z1 run: one launch proves both, neither changing the arithmetic."""
SELECTIVE = (["activation_checkpointing=selective"], {"recompute_granularity": "selective"})
FULL_BLOCK = (
    ["activation_checkpointing=full", "activation_checkpointing.method=block"],
    {"recompute_granularity": "full", "recompute_method": "block", "recompute_num_layers": 1},
)


@pytest.mark.parametrize("case", list(RECOMPUTE_CASES))
def test_recomputation_trains_to_the_same_loss(baseline, dataset, tmp_path, case):
    overrides, engine_args = RECOMPUTE_CASES[case]
    run = train(dataset, tmp_path / "run", "cpu/tiny_dp", *overrides)
    assert {key: run.args.get(key) for key in engine_args} == engine_args
    assert same_losses(run, baseline, 1e-5), (run.losses, baseline.losses)


def test_tensor_parallel_two(tensor_parallel):
    assert tensor_parallel.args["tensor_model_parallel_size"] == 2
    assert tensor_parallel.args["data_parallel_size"] == 1
    assert "initialized tensor model parallel with size 2" in tensor_parallel.text


def test_partitioned_contiguous_checkpoints_across_tensor_ranks_with_evaluation(
    tensor_parallel, dataset, tmp_path
):
    run = train(
        dataset,
        tmp_path / "run",
        "cpu/tiny_z1",
        "parallel.tensor=2",
        "activation_checkpointing=full",
        "activation_checkpointing.implementation=deepspeed",
        "activation_checkpointing.partition_activations=true",
        "activation_checkpointing.contiguous_memory=true",
        "train.eval_interval=2",
    )
    assert run.args["partition_activations"] is True and run.args["contigious_checkpointing"] is True
    assert len(run.log.validations) == 2  # at iteration 2 and at the end: forward passes without backward
    assert same_losses(run, tensor_parallel, 1e-5), (run.losses, tensor_parallel.losses)


@pytest.mark.parametrize("zero", ["z0", "z1"])
def test_pipeline_parallel_two(trained, zero):
    """Under ZeRO-1 with full recomputation across the pipeline's stages (engine_runs.SHARED_RUNS)."""
    run = trained("pp2" if zero == "z0" else "pp2_z1")
    assert run.args["pipeline_model_parallel_size"] == 2 and run.args["data_parallel_size"] == 1
    assert "initialized pipeline model parallel with size 2" in run.text
    assert run.ds["zero_optimization_stage"] == int(zero[1])
    assert run.args["recompute_granularity"] == (None if zero == "z0" else "full")


def test_bf16(baseline, trained):
    """In bf16 the engine picks its CUDA softmax kernel unless told not to (the CPU render does)."""
    run = trained("bf16")
    assert "zerolab: patch sdpa_attention" not in run.text  # the engine's own attention
    assert run.args["bf16"] is True and run.ds["bfloat16_config"].startswith("enabled=True")
    assert same_losses(run, baseline, 0.05), (run.losses, baseline.losses)


def test_micro_batch_one_with_more_accumulation_trains_the_same_batch(baseline, dataset, tmp_path):
    """With full recomputation by blocks (RECOMPUTE_CASES), which this launch proves too."""
    overrides, engine_args = FULL_BLOCK
    run = train(dataset, tmp_path / "run", "cpu/tiny_dp", "train.micro_batch_size=1", *overrides)
    assert run.args["micro_batch_size"] == 1 and run.ds["gradient_accumulation_steps"] == 4
    assert {key: run.args.get(key) for key in engine_args} == engine_args
    assert same_losses(run, baseline, 1e-4), (run.losses, baseline.losses)


def test_the_deepspeed_launcher(baseline, dataset, tmp_path):
    """With selective recomputation (RECOMPUTE_CASES), which this launch proves too."""
    overrides, engine_args = SELECTIVE
    run = train(dataset, tmp_path / "run", "cpu/tiny_dp", "hardware.launcher=deepspeed", *overrides)
    assert "deepspeed" in (run.run_dir / "command.sh").read_text()
    assert {key: run.args.get(key) for key in engine_args} == engine_args
    assert same_losses(run, baseline, 1e-5), (run.losses, baseline.losses)


def test_loggers_extra_settings_and_split_datasets_reach_the_engine(dataset, split_dataset, tmp_path):
    """One ZeRO-2 run (round_robin_gradients is a ZeRO-2 setting): the loggers write into the run
    directory, `extra`'s Megatron flags and DeepSpeed keys reach the engine, and it trains and
    evaluates on the train and valid datasets of `zerolab prep --split`."""
    run = train(
        dataset,
        tmp_path / "run",
        "cpu/tiny_z2",
        "data.path=null",
        f"data.train_path={split_dataset['train']}",
        f"data.valid_path={split_dataset['valid']}",
        "logging.tensorboard=true",
        "logging.wandb_project=zerolab-tests",
        "logging.wandb_mode=offline",
        "logging.timing_log_level=2",
        "extra.megatron_args=[--eod-mask-loss]",
        "extra.ds_config={zero_optimization: {round_robin_gradients: true}}",
    )
    events = list((run.run_dir / "tensorboard").glob("events.out.tfevents.*"))
    assert events and b"lm-loss-training/lm loss" in events[0].read_bytes()
    (offline,) = (run.run_dir / "wandb" / "wandb").glob("offline-run-*")
    (history,) = offline.glob("run-*.wandb")
    assert history.stat().st_size > 0
    name = run.args["wandb_exp_name"]  # the run's name: the logging overrides stay out of it
    assert name.startswith("tiny_z2+" + "+".join(SHORT) + "+extra.") and "logging" not in name, name
    assert run.args["eod_mask_loss"] is True and run.args["timing_log_level"] == 2
    assert "round_robin_gradients=True" in run.ds["zero_config"]
    assert run.args["data_path"] is None and run.args["train_data_path"] == str([split_dataset["train"]])
    assert run.args["valid_data_path"] == str([split_dataset["valid"]])
    assert run.log.validations, "the validation split was not evaluated"


GPU_RECIPES = sorted(p.stem for p in (REPO / "recipes").glob("gpt2_*.yaml") if "_fsdp2_" not in p.stem)
"""The seed GPU recipes on Megatron-DeepSpeed (their FSDP2 twins: test_fsdp2_engine)."""


@pytest.mark.parametrize("recipe", GPU_RECIPES)
def test_every_gpu_recipe_trains_shrunk_to_the_tiny_model_on_cpu(engine, dataset, tmp_path, recipe):
    """The GPU recipe's own settings (precision, recomputation, batch sizes, ZeRO, parallelism,
    data loading) with the model (and its context), the devices and the length (of training and of
    its final validation) made to fit this machine."""

    gpu = load_recipe(recipe)
    # two data-parallel ranks, as on the GPUs, where ZeRO has ranks to partition over; one with
    # model parallelism, whose ranks are the point (and 8 ranks on 2 cores take a minute)
    ranks = gpu.model_parallel_size * (2 if gpu.model_parallel_size == 1 else 1)
    run = train(
        dataset,
        tmp_path / "run",
        recipe,
        "model=gpt2-tiny",
        # the tiny model at a context of 8: these recipes train in bf16, which a CPU without bf16
        # instructions multiplies about 10 times slower than fp32 (the LM head of one micro batch
        # here, 32 tokens, forward and backward: 0.29 s against 0.03 s on one core of a 2-core
        # machine; at a context of 32 each of these tests took a third longer)
        "model.seq_length=8",
        "hardware=cpu-2ranks",
        "data.min_documents=null",  # the dolly sample, not the dolly-15k the recipe asks for
        f"hardware.procs_per_node={ranks}",
        "train.iters=2",
        "train.lr_warmup_iters=1",
        "train.log_interval=1",
        "train.eval_iters=1",  # the final validation still runs, on one global batch instead of five
        short=False,
    )
    assert run.args["micro_batch_size"] == gpu.train.micro_batch_size
    assert run.args["global_batch_size"] == gpu.train.global_batch_size
    assert run.args["zero_stage"] == gpu.zero.stage
    assert run.args["bf16"] is gpu.precision.bf16
    assert run.args["recompute_granularity"] == (
        None
        if gpu.activation_checkpointing.granularity == "none"
        else gpu.activation_checkpointing.granularity
    )
    assert run.args["tensor_model_parallel_size"] == gpu.parallel.tensor
    assert run.args["pipeline_model_parallel_size"] == gpu.parallel.pipeline
    assert run.log.validations, "the validation at the end of training is missing"
