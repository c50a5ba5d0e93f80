"""The parts of zerolab.porting.from_command that need no engine (the port itself:
tests/engine/test_porting_upstream.py)."""

from __future__ import annotations

import pytest

from zerolab.errors import UserError
from zerolab.porting.from_command import _reads_aio, _remainder, groups, launcher_layout, read_command


def test_a_command_line_is_split_at_pretrain_gpt_and_its_flags_grouped():
    launcher, args = read_command(
        "NCCL_DEBUG=1 deepspeed --num_gpus 4 \\\n  ../pretrain_gpt.py --num-layers 2 "
        "--data-path 0.5 a 0.5 b --fp16 --lr=1e-4\n"
    )
    assert launcher == ["NCCL_DEBUG=1", "deepspeed", "--num_gpus", "4", "../pretrain_gpt.py"]
    assert groups(args) == [
        ("--num-layers", ["2"]),
        ("--data-path", ["0.5", "a", "0.5", "b"]),
        ("--fp16", []),
        ("--lr", ["1e-4"]),
    ]
    assert launcher_layout(launcher, 8) == (1, 4)
    assert launcher_layout(["deepspeed", "pretrain_gpt.py"], 8) == (1, 8)
    assert launcher_layout(["torchrun", "--nnodes=2", "--nproc_per_node", "2", "pretrain_gpt.py"], 8) == (
        2,
        2,
    )


def test_a_value_before_any_flag_is_refused():
    with pytest.raises(UserError, match="before any --flag"):
        groups(["2", "--num-layers"])


def test_what_a_recipe_key_renders_is_taken_out_of_the_config_and_the_rest_kept():
    config = {"train_batch_size": 8, "zero_optimization": {"stage": 1, "sub_group_size": 5}, "aio": {"x": 1}}
    consumed = {"train_batch_size", "zero_optimization.stage"}
    assert _remainder(config, consumed) == {"zero_optimization": {"sub_group_size": 5}, "aio": {"x": 1}}


def test_the_aio_block_is_read_only_by_an_nvme_offload_or_a_checkpoint_writer():
    cpu = {"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"}}, "aio": {}}
    assert not _reads_aio(cpu)
    assert _reads_aio({"zero_optimization": {"offload_param": {"device": "nvme"}}})
    assert _reads_aio({"checkpoint": {"writer": {"type": "fast"}}})
