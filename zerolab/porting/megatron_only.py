"""A launch of Megatron without DeepSpeed (no --deepspeed: Megatron's own data parallelism and mixed
precision optimizer) as the DeepSpeed config that trains it the same way through DeepSpeed, which
zerolab always launches: ZeRO stage 0 (plain data parallel; stage 1 for Megatron's distributed
optimizer, which shards the optimizer states as ZeRO-1 does), the launch's batches and clipping, and
its fp16 loss scaler (Megatron's --loss-scale, --initial-loss-scale, --loss-scale-window,
--hysteresis and --min-loss-scale, at their Megatron defaults where the launch leaves them)."""

from __future__ import annotations

import math
from typing import Any

from zerolab.contracts import DEEPSPEED_CONFIG_FLAGS
from zerolab.porting.from_command import groups

MEGATRON_SCALER = {
    "--initial-loss-scale": ("initial_scale_power", 2.0**32),
    "--loss-scale-window": ("loss_scale_window", 1000),
    "--hysteresis": ("hysteresis", 2),
    "--min-loss-scale": ("min_loss_scale", 1.0),
}
"""Megatron's dynamic loss scaler's flags (megatron/arguments.py defaults) -> DeepSpeed fp16 keys."""
CLIP_GRAD_DEFAULT = 1.0


def without_deepspeed(args: list[str]) -> bool:
    """Whether the launch trains with Megatron alone (no --deepspeed)."""
    return "--deepspeed" not in {flag for flag, _ in groups(args)}


def through_deepspeed(args: list[str]) -> tuple[list[str], dict[str, Any], str]:
    """A Megatron-only launch's arguments with --deepspeed (a --deepspeed_config it names, which Megatron
    never read, left out), the DeepSpeed config that trains it the same way, and a note saying so."""
    flags = groups(args)
    given = dict(flags)
    kept = [
        token for flag, values in flags if flag not in DEEPSPEED_CONFIG_FLAGS for token in (flag, *values)
    ]

    def value(flag: str) -> str | None:
        return given[flag][0] if given.get(flag) else None

    config: dict[str, Any] = {"train_micro_batch_size_per_gpu": int(value("--micro-batch-size") or 1)}
    if value("--global-batch-size"):
        config["train_batch_size"] = int(value("--global-batch-size") or 0)
    config["gradient_clipping"] = float(value("--clip-grad") or CLIP_GRAD_DEFAULT)
    distributed = "--use-distributed-optimizer" in given
    config["zero_optimization"] = {"stage": 1 if distributed else 0}
    if "--bf16" in given:
        config["bf16"] = {"enabled": True}
    elif "--fp16" in given:
        scaler: dict[str, Any] = {"enabled": True}
        if value("--loss-scale"):
            scaler["loss_scale"] = float(value("--loss-scale") or 0)
        else:
            scaler["loss_scale"] = 0
            for flag, (key, default) in MEGATRON_SCALER.items():
                number = float(value(flag) or default)
                scaler[key] = (
                    int(math.log2(number)) if key == "initial_scale_power" else type(default)(number)
                )
        config["fp16"] = scaler
    stage = "stage 1 (Megatron's --use-distributed-optimizer shards the optimizer states as ZeRO-1)"
    note = (
        "your launch trains with Megatron alone (no --deepspeed); zerolab trains through DeepSpeed, here at "
        f"ZeRO {stage if distributed else 'stage 0 (plain data parallel, as Megatron DDP)'}, with your "
        "batches, clipping and Megatron's loss scaling as a DeepSpeed config: " + _shown(config)
    )
    if set(DEEPSPEED_CONFIG_FLAGS) & set(given):
        note += "; the --deepspeed_config your launch names is read only with --deepspeed: left out"
    return [*kept, "--deepspeed"], config, note


def _shown(config: dict[str, Any]) -> str:
    return ", ".join(f"{key} {value}" for key, value in config.items())
