"""The ZeRO setups compared (the configs/zero/ building blocks) and the one name of the setup a
run or recipe uses: `z0` ... `z3_offload_param`, prefixed `tpT_ppP_` with model parallelism."""

from __future__ import annotations

ZERO_SETUPS: tuple[tuple[str, str], ...] = (
    ("z0", "ZeRO 0"),
    ("z1", "ZeRO 1"),
    ("z2", "ZeRO 2"),
    ("z3", "ZeRO 3"),
    ("z3_offload", "ZeRO 3 + offload"),
    ("z3_offload_param", "ZeRO 3 + weight offload"),
)
"""The configs/zero/ blocks, from least to most partitioned, and their labels."""


def zero_setup(stage: int, offload_optimizer: bool | None, offload_param: bool | None) -> str:
    """`z{stage}`, then `_offload` when anything is offloaded (`_offload_param` when the weights
    are): the configs/zero/ block's name for the setups it has (`z2_offload` has none)."""
    name = f"z{stage}"
    if offload_optimizer or offload_param:
        name += "_offload_param" if offload_param else "_offload"
    return name


def setup_label(
    stage: int,
    offload_optimizer: bool | None,
    offload_param: bool | None,
    tensor: int | None = 1,
    pipeline: int | None = 1,
) -> str:
    """zero_setup's name, prefixed `tp2_pp4_` when the model is split (tensor or pipeline > 1)."""
    label = zero_setup(stage, offload_optimizer, offload_param)
    tensor, pipeline = tensor or 1, pipeline or 1
    return f"tp{tensor}_pp{pipeline}_{label}" if tensor > 1 or pipeline > 1 else label
