"""What the estimator models. The recipe schema's keys are all modelled but four (mixture of
experts, moe.num_experts above 1; distillation's teacher; FPDT's chunked sequence parallelism,
parallel.sequence_fpdt; a partial optimizer offload, zero.offload_ratio below 1), which it names;
the escape hatch (`extra.megatron_args`, `extra.ds_config`) is modelled only where a setting is known
not to change memory. Anything else makes the estimate refuse, naming the setting, rather than guess."""

from __future__ import annotations

from typing import Any

from zerolab.recipe.schema import Recipe

NEUTRAL_MEGATRON_ARGS = frozenset(
    {
        "--adam-eps",
        "--exit-signal-handler",
        "--log-memory-to-tensorboard",
        "--log-num-zeros-in-grad",
        "--log-params-norm",
        "--log-world-size-to-tensorboard",
        "--lr-decay-iters",
        "--lr-warmup-fraction",
        "--override-opt_param-scheduler",
        "--timing-log-option",
    }
)
"""pretrain_gpt.py options that change logging, schedules or when to stop, not memory, and that no recipe
key renders (extra.megatron_args refuses those: the keys' own settings are modelled)."""

NEUTRAL_DS_CONFIG_KEYS = frozenset(
    {
        "comms_logger",
        "csv_monitor",
        "dump_state",
        "flops_profiler",
        "memory_breakdown",
        "tensorboard",
        "wandb",
        "zero_allow_untested_optimizer",
        "zero_force_ds_cpu_optimizer",
    }
)
"""Top-level ds_config keys that change logging or checks, not memory."""


def unmodelled_settings(recipe: Recipe) -> list[str]:
    """The recipe's settings the estimate cannot account for, each with why (empty: all modelled)."""
    reasons = []
    if recipe.moe.enabled:
        reasons.append(
            f"moe.num_experts {recipe.moe.experts}: the estimate does not model mixture of experts (the "
            "experts' weights, gradients and optimizer states over the expert-parallel ranks, the gates, "
            "the all-to-all buffers of the routed tokens)"
        )
    if recipe.parallel.sequence_fpdt:
        reasons.append(
            "parallel.sequence_fpdt: FPDT computes attention and MLP in chunks (offloaded to the host with "
            "sequence_fpdt_offloading); the estimate models whole-sequence activations only"
        )
    ratio = recipe.zero.offload_ratio
    if recipe.zero.offload_optimizer and ratio is not None and ratio < 1:
        reasons.append(
            f"zero.offload_ratio {ratio}: part of the optimizer stays on the GPU (Twin-Flow), by sub-groups; "
            "the estimate models a whole offload only"
        )
    if recipe.distillation.enabled:
        reasons.append(
            "distillation: the estimate does not model the teacher (its weights, kept beside the student's "
            "on each rank, and its activations in the forward pass)"
        )
    for token in recipe.extra.megatron_args:
        flag = token.split("=", 1)[0]
        if flag.startswith("--") and flag not in NEUTRAL_MEGATRON_ARGS:
            reasons.append(f"extra.megatron_args {flag}: the estimate does not know what it does to memory")
    for key in _dotted_keys(recipe.extra.ds_config):
        if key.split(".", 1)[0] not in NEUTRAL_DS_CONFIG_KEYS:
            reasons.append(f"extra.ds_config {key}: the estimate does not know what it does to memory")
    return reasons


def _dotted_keys(mapping: dict[str, Any], prefix: str = "") -> list[str]:
    """`zero_optimization.sub_group_size`-style names of every leaf of a nested mapping."""
    keys = []
    for key, value in mapping.items():
        if isinstance(value, dict) and value:
            keys += _dotted_keys(value, f"{prefix}{key}.")
        else:
            keys.append(f"{prefix}{key}")
    return keys
