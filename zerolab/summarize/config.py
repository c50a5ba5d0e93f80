"""The config columns of a row: run.json first, then the log's argument dump,
DeepSpeed config dump and user json; a value nobody states stays None."""

from __future__ import annotations

from typing import Any

from zerolab.logs.parse import ParsedLog

GPT2_SIZES = {
    (12, 768): "gpt2-124m",
    (24, 1024): "gpt2-355m",
    (36, 1280): "gpt2-774m",
    (48, 1600): "gpt2-1.5b",
}


def _first(*values: Any) -> Any:
    for value in values:
        if value is not None and value != "":
            return value
    return None


def _int(value: Any) -> int | None:
    """A size or count as a whole number >= 0; None for anything else (text, NaN, infinity, < 0)."""
    if isinstance(value, bool) or value is None:
        return None
    try:
        number = int(float(value))
    except (TypeError, ValueError, OverflowError):
        return None
    return number if number >= 0 else None


def _precision(args: dict[str, Any], ds: dict[str, Any], ds_json: dict[str, Any]) -> str | None:
    def enabled(section: str) -> Any:
        value = ds_json.get(section)
        return value.get("enabled") if isinstance(value, dict) else None

    bf16 = _first(ds.get("bfloat16_enabled"), enabled("bf16"), enabled("bfloat16"), args.get("bf16"))
    fp16 = _first(ds.get("fp16_enabled"), enabled("fp16"), args.get("fp16"))
    if bf16 is True:
        return "bf16"
    if fp16 is True:
        return "fp16"
    if bf16 is False or fp16 is False:
        return "fp32"
    return None


def _offload(ds_json: dict[str, Any], *keys: str) -> bool | None:
    """Whether the ds_config offloads any of `keys` (offload_optimizer, offload_param)."""
    zero = ds_json.get("zero_optimization")
    if not isinstance(zero, dict):
        return None
    devices = []
    for key in keys:
        section = zero.get(key)
        devices.append(section.get("device") if isinstance(section, dict) else None)
    return any(device not in (None, "none") for device in devices)


def model_name(num_layers: int | None, hidden_size: int | None) -> str | None:
    """`gpt2-355m` for GPT-2's shapes, `gpt-2L-64h` otherwise, None when unknown."""
    if num_layers is None or hidden_size is None:
        return None
    return GPT2_SIZES.get((num_layers, hidden_size), f"gpt-{num_layers}L-{hidden_size}h")


def config_columns(run: dict[str, Any], log: ParsedLog) -> dict[str, Any]:
    """The config columns, each from the first source that states it."""
    args, ds, ds_json = log.config.args, log.config.ds, log.config.ds_json
    zero = ds_json.get("zero_optimization") if isinstance(ds_json.get("zero_optimization"), dict) else {}
    num_layers = _int(_first(run.get("num_layers"), args.get("num_layers")))
    hidden = _int(_first(run.get("hidden_size"), args.get("hidden_size")))
    last_gbs = log.iterations["global_batch_size"]
    gbs_from_lines = _int(last_gbs[-1]) if len(last_gbs) and last_gbs[-1] == last_gbs[-1] else None
    return {
        "model": _first(run.get("model"), model_name(num_layers, hidden)),
        "num_layers": num_layers,
        "hidden_size": hidden,
        "ffn_hidden_size": _int(args.get("ffn_hidden_size")),
        "seq_length": _int(_first(run.get("seq_length"), args.get("seq_length"))),
        "padded_vocab_size": _int(_first(run.get("padded_vocab_size"), args.get("padded_vocab_size"))),
        "world_size": _int(_first(run.get("world_size"), args.get("world_size"), ds.get("world_size"))),
        "tensor_parallel": _int(_first(run.get("tensor_parallel"), args.get("tensor_model_parallel_size"))),
        "pipeline_parallel": _int(
            _first(run.get("pipeline_parallel"), args.get("pipeline_model_parallel_size"))
        ),
        "zero_stage": _int(
            _first(
                run.get("zero_stage"),
                ds.get("zero_optimization_stage"),
                zero.get("stage"),
                args.get("zero_stage"),
            )
        ),
        "offload": _first(
            run.get("offload_optimizer") or run.get("offload_param") if run else None,
            _offload(ds_json, "offload_optimizer", "offload_param"),
        ),
        "offload_param": _first(run.get("offload_param"), _offload(ds_json, "offload_param")),
        "micro_batch_size": _int(
            _first(
                run.get("micro_batch_size"),
                args.get("micro_batch_size"),
                ds.get("train_micro_batch_size_per_gpu"),
                ds_json.get("train_micro_batch_size_per_gpu"),
            )
        ),
        "global_batch_size": _int(
            _first(
                run.get("global_batch_size"),
                args.get("global_batch_size"),
                gbs_from_lines,
                ds.get("train_batch_size"),
                ds_json.get("train_batch_size"),
            )
        ),
        "precision": _first(run.get("precision"), _precision(args, ds, ds_json)),
        "recompute": _first(run.get("recompute_granularity"), args.get("recompute_granularity")) == "full"
        or bool(args.get("checkpoint_activations")),
        "epoch_tokens": _first(run.get("epoch_tokens")),
    }


def setup_label(columns: dict[str, Any]) -> str | None:
    """`dp`, `z1`, `z2`, `z3`, `z3_offload`, `z3_offload_param` (prefixed `tp2_pp4_` with model
    parallelism)."""
    stage = columns["zero_stage"]
    if stage is None:
        return None
    label = "dp" if stage == 0 else f"z{stage}"
    if columns["offload"]:
        label += "_offload_param" if columns["offload_param"] else "_offload"
    tp, pp = columns["tensor_parallel"] or 1, columns["pipeline_parallel"] or 1
    return f"tp{tp}_pp{pp}_{label}" if tp > 1 or pp > 1 else label
