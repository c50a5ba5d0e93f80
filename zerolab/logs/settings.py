"""A run's settings as its log states them: the one reader of Megatron's argument dump, DeepSpeed's
config dump and the user json it printed, for the summary's config columns and for the estimate of
a plain log. They are run.json's facts (zerolab.rundir.RunFacts) as the log states them, and the
few only a log states, so that a summary reads one typed record whichever source it came from. A
setting the log does not state is None, never a guess."""

from __future__ import annotations

from typing import Any

from zerolab.logs.parse import ParsedLog
from zerolab.rundir import RunFacts


class LogSettings(RunFacts):
    """What the log says the run was: run.json's facts (those a log states: sizes, parallelism, ZeRO
    stage and offload, batches, `precision` `bf16`, `fp16` or `fp32`, `recompute_granularity`) and
    what only the log states; None where it does not say."""

    ffn_hidden_size: int | None = None
    kv_channels: int | None = None
    max_position_embeddings: int | None = None


def first_stated(*values: Any) -> Any:
    """The first value that is neither None nor empty text; None when there is none."""
    for value in values:
        if value is not None and value != "":
            return value
    return None


def whole_number(value: Any) -> int | None:
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

    bf16 = first_stated(ds.get("bfloat16_enabled"), enabled("bf16"), enabled("bfloat16"), args.get("bf16"))
    fp16 = first_stated(ds.get("fp16_enabled"), enabled("fp16"), args.get("fp16"))
    if bf16 is True:
        return "bf16"
    if fp16 is True:
        return "fp16"
    if bf16 is False or fp16 is False:
        return "fp32"
    return None


def zero_section(ds_json: dict[str, Any]) -> dict[str, Any] | None:
    """The user json's `zero_optimization` section; None when it has none."""
    section = ds_json.get("zero_optimization")
    return section if isinstance(section, dict) else None


def _offloaded(zero: dict[str, Any] | None, key: str, by_argument: bool) -> bool | None:
    """Whether `key` (offload_optimizer, offload_param) goes off the GPU: by the ds_config's device,
    or by Megatron's argument; None when neither states it."""
    if by_argument:
        return True
    if zero is None:
        return None
    section = zero.get(key)
    return isinstance(section, dict) and section.get("device") not in (None, "none")


def zero_variant_facts(zero: dict[str, Any] | None) -> dict[str, Any]:
    """ZeRO++ and MiCS as the ds_config's zero_optimization states them (run.json's names); a size at
    DeepSpeed's off value (hpZ 1, MiCS -1) is none."""
    zero = zero or {}
    hpz, mics = whole_number(zero.get("zero_hpz_partition_size")), whole_number(zero.get("mics_shard_size"))
    return {
        "hpz_partition_size": hpz if hpz and hpz > 1 else None,
        "quantized_weights": zero.get("zero_quantized_weights"),
        "quantized_gradients": zero.get("zero_quantized_gradients"),
        "mics_shard_size": mics if mics and mics > 0 else None,
    }


def read_settings(log: ParsedLog) -> LogSettings:
    """The settings `log` states (its last global batch size when no dump states one)."""
    args, ds, ds_json = log.config.args, log.config.ds, log.config.ds_json
    zero = zero_section(ds_json)
    stated_stage = (zero or {}).get("stage")
    stage = whole_number(
        first_stated(ds.get("zero_optimization_stage"), stated_stage, args.get("zero_stage"))
    )
    batches = log.iterations["global_batch_size"]
    last_batch = whole_number(batches[-1]) if len(batches) and batches[-1] == batches[-1] else None
    recompute = args.get("recompute_granularity")
    # built without run.json's ranges: a log's values are whatever it printed, each read as a number here
    return LogSettings.model_construct(
        num_layers=whole_number(args.get("num_layers")),
        hidden_size=whole_number(args.get("hidden_size")),
        num_attention_heads=whole_number(args.get("num_attention_heads")),
        ffn_hidden_size=whole_number(args.get("ffn_hidden_size")),
        kv_channels=whole_number(args.get("kv_channels")),
        seq_length=whole_number(args.get("seq_length")),
        max_position_embeddings=whole_number(args.get("max_position_embeddings")),
        padded_vocab_size=whole_number(args.get("padded_vocab_size")),
        world_size=whole_number(first_stated(args.get("world_size"), ds.get("world_size"))),
        tensor_parallel=whole_number(args.get("tensor_model_parallel_size")),
        pipeline_parallel=whole_number(args.get("pipeline_model_parallel_size")),
        zero_stage=stage,
        offload_optimizer=_offloaded(
            zero, "offload_optimizer", args.get("cpu_optimizer") is True and bool(stage)
        ),
        offload_param=_offloaded(zero, "offload_param", args.get("remote_device") == "cpu"),
        **zero_variant_facts(zero),
        micro_batch_size=whole_number(
            first_stated(
                args.get("micro_batch_size"),
                ds.get("train_micro_batch_size_per_gpu"),
                ds_json.get("train_micro_batch_size_per_gpu"),
            )
        ),
        global_batch_size=whole_number(
            first_stated(
                args.get("global_batch_size"),
                last_batch,
                ds.get("train_batch_size"),
                ds_json.get("train_batch_size"),
            )
        ),
        precision=_precision(args, ds, ds_json),
        # whole layers recomputed: `--recompute-granularity full`, or the older `--checkpoint-activations`
        recompute_granularity="full"
        if args.get("checkpoint_activations")
        else (recompute if isinstance(recompute, str) else None),
    )
