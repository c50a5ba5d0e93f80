"""The ZeRO setups compared (the configs/zero/ building blocks) and the one name of the setup a
run or recipe uses: `z0` ... `z3_offload_param`, ZeRO++ and MiCS's `z3_hpz`, `z3_zeropp`, `z3_mics`,
prefixed `tpT_ppP_` with model parallelism."""

from __future__ import annotations

ZERO_SETUPS: tuple[tuple[str, str], ...] = (
    ("z0", "ZeRO 0"),
    ("z1", "ZeRO 1"),
    ("z2", "ZeRO 2"),
    ("z3", "ZeRO 3"),
    ("z3_offload", "ZeRO 3 + offload"),
    ("z3_offload_param", "ZeRO 3 + weight offload"),
    ("z3_hpz", "ZeRO++ hpZ"),
    ("z3_zeropp", "ZeRO++ (hpZ, qwZ, qgZ)"),
    ("z3_mics", "MiCS"),
)
"""The configs/zero/ blocks, from least to most partitioned, and their labels."""


def zero_setup(
    stage: int,
    offload_optimizer: bool | None,
    offload_param: bool | None,
    hpz: int | None = None,
    quantized: bool | None = None,
    mics: int | None = None,
) -> str:
    """`z{stage}`, then `_offload` when anything is offloaded (`_offload_param` when the weights
    are), `_hpz` with hpZ's secondary partition (`_zeropp` with quantized weights or gradients too)
    and `_mics` with MiCS shards: the configs/zero/ block's name for the setups it has (`z2_offload`
    has none)."""
    name = f"z{stage}"
    if offload_optimizer or offload_param:
        name += "_offload_param" if offload_param else "_offload"
    if quantized:
        name += "_zeropp"
    elif hpz and hpz > 1:
        name += "_hpz"
    if mics and mics > 0:
        name += "_mics"
    return name


def zero_variant(zero: object) -> dict[str, object]:
    """zero_setup's ZeRO++ and MiCS arguments from anything with the zero keys' names (a recipe's
    zero section, run.json's facts)."""
    quantized = bool(getattr(zero, "quantized_weights", None) or getattr(zero, "quantized_gradients", None))
    return {
        "hpz": getattr(zero, "hpz_partition_size", None),
        "quantized": quantized,
        "mics": getattr(zero, "mics_shard_size", None),
    }


def setup_label(
    stage: int,
    offload_optimizer: bool | None,
    offload_param: bool | None,
    tensor: int | None = 1,
    pipeline: int | None = 1,
    variant: dict[str, object] | None = None,
) -> str:
    """zero_setup's name (with zero_variant's ZeRO++ and MiCS), prefixed `tp2_pp4_` when the model is
    split (tensor or pipeline > 1)."""
    label = zero_setup(stage, offload_optimizer, offload_param, **(variant or {}))
    tensor, pipeline = tensor or 1, pipeline or 1
    return f"tp{tensor}_pp{pipeline}_{label}" if tensor > 1 or pipeline > 1 else label
