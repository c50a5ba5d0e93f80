"""DeepSpeed configs written for older DeepSpeed versions, migrated to the pinned DeepSpeed 0.19.6
with each change named: the legacy `bfloat16` block renamed `bf16` (runtime/config.py still reads
it, as BFLOAT16_OLD, but only where no bf16 block is given), and fp16's loss-scaling keys copied into
a bf16 block dropped (bf16 trains without loss scaling; the pinned DeepSpeedBF16Config refuses
them as extra inputs)."""

from __future__ import annotations

import copy
from typing import Any

LOSS_SCALING = (
    "loss_scale",
    "initial_scale_power",
    "loss_scale_window",
    "hysteresis",
    "consecutive_hysteresis",
    "min_loss_scale",
)
"""fp16's dynamic loss-scaling keys (DeepSpeedFP16Config), which bf16 has no use for."""


def migrated(config: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """`config` as the pinned DeepSpeed reads it, and a note for each change."""
    out, notes = copy.deepcopy(config), []
    if isinstance(out.get("bfloat16"), dict):
        block = out.pop("bfloat16")
        if "bf16" in out:
            notes.append("ds_config bfloat16: the legacy name of bf16, which your config also has (DeepSpeed "
                         "reads bf16 alone then): left out")  # fmt: skip
        else:
            out["bf16"] = block
            notes.append("ds_config bfloat16: the legacy name of the bf16 block (DeepSpeed before 0.9), "
                         "renamed bf16")  # fmt: skip
    bf16 = out.get("bf16")
    if isinstance(bf16, dict):
        copied = [key for key in LOSS_SCALING if key in bf16]
        for key in copied:
            del bf16[key]
        if copied:
            keys = ", ".join(copied)
            notes.append(f"ds_config bf16 {keys}: fp16's loss-scaling keys, which bf16 trains without (the "
                         "pinned DeepSpeed's DeepSpeedBF16Config refuses them): left out")  # fmt: skip
    return out, notes
