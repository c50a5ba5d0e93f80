"""The schema declares where each key goes; render writes the one-to-one keys from those declarations
and the rule-derived ones in code. These tests tie the two: every flag render writes is declared on
the field it comes from (or is plumbing no key sets), and every flag or variable a field declares
with a rule is rendered when the rule applies, and only then."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest

from zerolab.contracts import SWITCH_NAMES
from zerolab.recipe.compose import load_recipe
from zerolab.recipe.destinations import Env, Megatron, destinations
from zerolab.recipe.render import render
from zerolab.recipe.schema import Recipe

RENDER_SOURCES = [
    Path(inspect.getfile(load_recipe)).with_name(name) for name in ("render.py", "pretraining.py")
]
"""Where the launch's flags are written: the launcher's, and pretrain_gpt.py's."""

PLUMBING = {
    # the launchers' own options (torchrun, deepspeed), from hardware.*: Launcher destinations
    "--nnodes", "--nproc-per-node", "--node-rank", "--master-addr", "--master-port", "--module",
    "--hostfile", "--num_nodes", "--num_gpus", "--node_rank", "--master_addr", "--master_port",
    "--no_ssh",
    # DeepSpeed on, and the ds_config render writes
    "--deepspeed", "--deepspeed_config",
    # the run directory's checkpoints, TensorBoard and W&B files, beside the declared flags they follow
    "--save", "--load", "--override-opt_param-scheduler", "--universal-checkpoint",
    "--tensorboard-log-interval", "--log-timers-to-tensorboard", "--log-validation-ppl-to-tensorboard",
    "--wandb-save-dir",
    # the imported weights' layout and the weights-only load, beside model.init_from's --load
    "--load-tag", "--finetune",
    # the engine's compiled fusion of gradient accumulation, off: nothing calls it (render.fusion_args)
    "--no-gradient-accumulation-fusion",
}  # fmt: skip
"""Flags render writes that no recipe key declares."""

OFFLOAD_PARAM = ["zero=z3_offload_param"]
DEEPSPEED_FULL = ["activation_checkpointing=full", "activation_checkpointing.implementation=deepspeed"]
WANDB = ["logging.wandb_project=study"]
ON_GPU = ("gpt2_z1", [])
ON_CPU = ("cpu/tiny_z1", [])
ENGINE_ATTENTION = ("gpt2_z1", ["model.attention=megatron"])
PREPARED = ["data.path=tests/fixtures/recipe-data/dolly151_text_document", "data.split=100,0,0"]
SPLIT_DATASETS = ["data.path=null", "data.train_path=d/x_train_text_document"]
NO_SWITCH = ("gpt2_z1", [f"speed.{name}=false" for name in SWITCH_NAMES])

RULES: dict[tuple[str, str], tuple[tuple[str, list[str]], tuple[str, list[str]] | None]] = {
    ("model.init_from", "--load"): (("gpt2_z1", ["model.init_from=weights/gpt2"]), ON_GPU),
    ("model.attention", "--use-flash-attn-v2"): (("gpt2_z1", ["model.attention=flash"]), ENGINE_ATTENTION),
    ("model.attention", "ZEROLAB_ATTENTION"): (("gpt2_z1", ["model.attention=sdpa"]), ENGINE_ATTENTION),
    ("model.attention", "--use-flash-attn-v1"): (("gpt2_z1", ["model.attention=flash-v1"]), ENGINE_ATTENTION),
    ("model.masked_softmax_fusion", "--no-masked-softmax-fusion"): (
        ("gpt2_z1", ["model.attention=megatron", "model.masked_softmax_fusion=false"]),
        ENGINE_ATTENTION,
    ),
    ("model.attention", "--use-flash-attn-triton"): (
        ("gpt2_z1", ["model.attention=flash-triton"]),
        ENGINE_ATTENTION,
    ),
    ("parallel.pipeline", "--no-pipeline-parallel"): (ON_GPU, ("gpt2_tp2_pp2", [])),
    ("moe.token_dropping", "--disable-moe-token-dropping"): (
        ("cpu/tiny_dp", ["moe.num_experts=2", "moe.token_dropping=false"]),
        ("cpu/tiny_dp", ["moe.num_experts=2"]),
    ),
    ("parallel.sequence", "--ds-sequence-parallel-size"): (
        ("gpt2_z1", ["model=gpt2-355m", "parallel.sequence=2", "train.global_batch_size=16"]),
        ON_GPU,
    ),
    ("data.path", "--data-path"): (ON_GPU, ("gpt2_z1", SPLIT_DATASETS)),
    ("data.train_path", "--train-data-path"): (("gpt2_z1", SPLIT_DATASETS), ON_GPU),
    ("data.valid_path", "--valid-data-path"): (
        ("gpt2_z1", [*SPLIT_DATASETS, "data.valid_path=d/x_valid_text_document"]),
        ("gpt2_z1", SPLIT_DATASETS),
    ),
    ("data.test_path", "--test-data-path"): (
        ("gpt2_z1", [*SPLIT_DATASETS, "data.test_path=d/x_test_text_document"]),
        ("gpt2_z1", SPLIT_DATASETS),
    ),
    ("zero.offload_optimizer", "--cpu-optimizer"): (("gpt2_z3_offload", []), ("gpt2_z3", [])),
    ("zero.pin_memory", "--use-pin-memory"): (("gpt2_z1", OFFLOAD_PARAM), ("gpt2_z3_offload", [])),
    ("zero.offload_param", "--remote-device"): (("gpt2_z1", OFFLOAD_PARAM), ("gpt2_z3_offload", [])),
    ("activation_checkpointing.granularity", "--recompute-granularity"): (
        ("gpt2_z1", ["activation_checkpointing=selective"]),
        ("gpt2_z1", DEEPSPEED_FULL),
    ),
    ("activation_checkpointing.granularity", "--checkpoint-activations"): (
        ("gpt2_z1", DEEPSPEED_FULL),
        ("gpt2_z1", ["activation_checkpointing=full"]),
    ),
    ("activation_checkpointing.method", "--recompute-method"): (
        ("gpt2_z1", ["activation_checkpointing=full"]),
        ("gpt2_z1", ["activation_checkpointing=selective"]),
    ),
    ("activation_checkpointing.num_layers", "--recompute-num-layers"): (
        ("gpt2_z1", ["activation_checkpointing=full"]),
        ("gpt2_z1", DEEPSPEED_FULL),
    ),
    ("activation_checkpointing.num_layers", "--checkpoint-num-layers"): (
        ("gpt2_z1", DEEPSPEED_FULL),
        ("gpt2_z1", ["activation_checkpointing=full"]),
    ),
    ("activation_checkpointing.implementation", "--deepspeed-activation-checkpointing"): (
        ("gpt2_z1", DEEPSPEED_FULL),
        ("gpt2_z1", ["activation_checkpointing=full"]),
    ),
    ("activation_checkpointing.partition_activations", "--partition-activations"): (
        ("gpt2_z1", [*DEEPSPEED_FULL, "activation_checkpointing.partition_activations=true"]),
        ("gpt2_z1", DEEPSPEED_FULL),
    ),
    ("activation_checkpointing.contiguous_memory", "--contigious-checkpointing"): (
        (
            "gpt2_z1",
            [
                *DEEPSPEED_FULL,
                "activation_checkpointing.partition_activations=true",
                "activation_checkpointing.contiguous_memory=true",
            ],
        ),
        ("gpt2_z1", DEEPSPEED_FULL),
    ),
    ("activation_checkpointing.cpu_checkpointing", "--checkpoint-in-cpu"): (
        (
            "gpt2_z1",
            [
                *DEEPSPEED_FULL,
                "activation_checkpointing.partition_activations=true",
                "activation_checkpointing.cpu_checkpointing=true",
            ],
        ),
        ("gpt2_z1", DEEPSPEED_FULL),
    ),
    ("data.split", "--split"): (ON_GPU, ("cpu/tiny_z1", SPLIT_DATASETS)),
    ("data.vocab_file", "--vocab-file"): (ON_GPU, None),
    ("data.merge_file", "--merge-file"): (ON_GPU, None),
    ("train.iters", "--train-iters"): (ON_GPU, None),
    ("train.tokens", "--train-iters"): (("gpt2_z1", ["train.iters=null", "train.tokens=1000000"]), None),
    ("train.epochs", "--train-iters"): (
        ("cpu/tiny_z1", [*PREPARED, "train.iters=null", "train.epochs=1"]),
        None,
    ),
    ("train.save_interval", "--save-interval"): (("gpt2_z1", ["train.save_interval=50"]), ON_GPU),
    ("train.save_interval_epochs", "--save-interval"): (
        ("cpu/tiny_z1", [*PREPARED, "train.save_interval=null", "train.save_interval_epochs=1"]),
        ON_GPU,
    ),
    ("hardware.device", "DS_ACCELERATOR"): (ON_CPU, ON_GPU),
    ("hardware.device", "--distributed-backend"): (ON_CPU, None),
    ("hardware.procs_per_node", "LOCAL_SIZE"): (ON_CPU, ("cpu/tiny_z1", ["hardware.launcher=deepspeed"])),
    ("hardware.host_huge_pages", "THP_MEM_ALLOC_ENABLE"): (
        ON_CPU,
        ("cpu/tiny_z1", ["hardware.host_huge_pages=false"]),
    ),
    ("logging.tensorboard", "--tensorboard-dir"): (("gpt2_z1", ["logging.tensorboard=true"]), ON_GPU),
    ("logging.wandb_project", "--wandb-project"): (("gpt2_z1", WANDB), ON_GPU),
    ("logging.wandb_name", "--wandb-exp-name"): (("gpt2_z1", WANDB), ON_GPU),
    ("logging.wandb_mode", "WANDB_MODE"): (("gpt2_z1", WANDB), ON_GPU),
    **{
        (f"speed.{name}", "ZEROLAB_SPEED"): (("gpt2_z1", [f"speed.{name}=true"]), NO_SWITCH)
        for name in SWITCH_NAMES
    },
}
"""(field, flag or variable) -> (a recipe and overrides where the rule applies, one where it does not
or None when it always applies)."""


def _declared(model: type, prefix: str = "") -> dict[tuple[str, str], Megatron | Env]:
    found: dict[tuple[str, str], Megatron | Env] = {}
    for name, info in model.model_fields.items():
        for item in destinations(info):
            if isinstance(item, Megatron) and item.flag != "...":
                found[(prefix + name, item.flag)] = item
            elif isinstance(item, Env):
                found[(prefix + name, item.name)] = item
        if inspect.isclass(info.annotation) and hasattr(info.annotation, "model_fields"):
            found |= _declared(info.annotation, f"{prefix}{name}.")
    return found


DECLARED = _declared(Recipe)


def test_every_flag_render_writes_is_declared_on_its_field_or_is_plumbing():
    written = {
        flag
        for source in RENDER_SOURCES
        for flag in re.findall(r'"(--[a-z][A-Za-z0-9_-]*)"', source.read_text())
    }
    flags = {flag for _, flag in DECLARED if flag.startswith("--")}
    assert sorted(written - flags - PLUMBING) == [], "declare these on their schema field"
    assert sorted(PLUMBING - written) == [], "render no longer writes these"


def test_every_rule_declared_on_a_field_has_a_case_here():
    with_rule = {key for key, item in DECLARED.items() if item.rule}
    assert sorted(with_rule ^ set(RULES)) == []


def _rendered(recipe: str, overrides: list[str]) -> tuple[list[str], dict[str, str]]:
    launch = render(load_recipe(recipe, overrides))
    return launch.argv, launch.env


@pytest.mark.parametrize("key", sorted(RULES), ids=lambda key: f"{key[0]}->{key[1]}")
def test_a_rule_derived_flag_is_rendered_when_its_rule_applies_and_only_then(key):
    _, name = key
    applies, does_not = RULES[key]
    argv, env = _rendered(*applies)
    assert name in (argv if name.startswith("--") else env)
    if does_not is not None:
        argv, env = _rendered(*does_not)
        assert name not in (argv if name.startswith("--") else env)
