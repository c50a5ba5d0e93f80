"""Property: any batch setting the checks accept renders Megatron and DeepSpeed numbers
that agree; any they refuse is refused with exit 2 naming the batch keys."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from zerolab.errors import UserError
from zerolab.recipe.compose import load_recipe
from zerolab.recipe.render import render

TENSOR_PIPELINE = [(1, 1), (2, 1), (1, 2), (2, 2), (4, 1), (1, 4)]


def option(argv, name):
    return argv[argv.index(name) + 1]


@settings(max_examples=150, deadline=None)
@given(
    nodes=st.integers(1, 4),
    procs=st.sampled_from([1, 2, 4, 8]),
    layout=st.sampled_from(TENSOR_PIPELINE),
    micro=st.integers(1, 16),
    accumulation=st.one_of(st.none(), st.integers(1, 16)),
    global_batch=st.integers(1, 1024),
)
def test_batch_numbers_agree_or_are_refused(nodes, procs, layout, micro, accumulation, global_batch):
    tensor, pipeline = layout
    overrides = [
        f"hardware.nodes={nodes}",
        f"hardware.procs_per_node={procs}",
        "hardware.master_addr=node0",
        f"parallel.tensor={tensor}",
        f"parallel.pipeline={pipeline}",
        "zero.stage=1",
        f"train.micro_batch_size={micro}",
        f"train.gradient_accumulation_steps={'null' if accumulation is None else accumulation}",
        f"train.global_batch_size={global_batch}",
    ]
    world = nodes * procs
    consistent = world % (tensor * pipeline) == 0 and (
        global_batch % (micro * world // (tensor * pipeline)) == 0
        if accumulation is None
        else global_batch == micro * accumulation * world // (tensor * pipeline)
    )
    try:
        launch = render(load_recipe("gpt2_z1", [*overrides, "model=gpt2-124m"]))
    except UserError as error:
        assert not consistent, str(error)
        assert "parallel.tensor" in str(error) or "train.global_batch_size" in str(error)
        return
    assert consistent
    data_parallel = world // (tensor * pipeline)
    cfg = launch.ds_config
    assert launch.world_size == world
    assert cfg["train_batch_size"] == int(option(launch.argv, "--global-batch-size")) == global_batch
    assert cfg["train_micro_batch_size_per_gpu"] == int(option(launch.argv, "--micro-batch-size")) == micro
    assert cfg["train_batch_size"] == micro * cfg["gradient_accumulation_steps"] * data_parallel
    assert ("--no-pipeline-parallel" in launch.argv) == (pipeline == 1)
    assert option(launch.argv, "--zero-stage") == str(cfg["zero_optimization"]["stage"])
