"""The config columns of a row: run.json first, then what the log states (logs.settings); a value
nobody states stays None."""

from __future__ import annotations

from typing import Any

from zerolab.logs.parse import ParsedLog
from zerolab.logs.settings import first_stated, read_settings, whole_number
from zerolab.recipe.compose import model_name_of_shape
from zerolab.recipe.setups import setup_label as label_of_setup


def _any_offloaded(*offloads: bool | None) -> bool | None:
    """True when any is, None when none is stated, else False."""
    if any(offloads):
        return True
    return None if all(offload is None for offload in offloads) else False


def config_columns(run: dict[str, Any], log: ParsedLog) -> dict[str, Any]:
    """The config columns, each from the first source that states it."""
    stated = read_settings(log)

    def column(run_key: str, log_value: Any) -> int | None:
        return whole_number(first_stated(run.get(run_key), log_value))

    num_layers = column("num_layers", stated.num_layers)
    hidden = column("hidden_size", stated.hidden_size)
    shape = {
        "num_layers": num_layers,
        "hidden_size": hidden,
        "num_attention_heads": stated.num_attention_heads,
        "max_position_embeddings": stated.max_position_embeddings,
    }
    return {
        # the model blocks are read only for a run that run.json does not name
        "model": first_stated(run.get("model")) or model_name_of_shape(shape),
        "num_layers": num_layers,
        "hidden_size": hidden,
        "ffn_hidden_size": stated.ffn_hidden_size,
        "seq_length": column("seq_length", stated.seq_length),
        "padded_vocab_size": column("padded_vocab_size", stated.padded_vocab_size),
        "world_size": column("world_size", stated.world_size),
        "nodes": column("nodes", None),
        "tensor_parallel": column("tensor_parallel", stated.tensor_parallel),
        "pipeline_parallel": column("pipeline_parallel", stated.pipeline_parallel),
        "zero_stage": column("zero_stage", stated.zero_stage),
        "offload": first_stated(
            _any_offloaded(run.get("offload_optimizer"), run.get("offload_param")) if run else None,
            _any_offloaded(stated.offload_optimizer, stated.offload_param),
        ),
        "offload_param": first_stated(run.get("offload_param"), stated.offload_param),
        "micro_batch_size": column("micro_batch_size", stated.micro_batch_size),
        "global_batch_size": column("global_batch_size", stated.global_batch_size),
        "precision": first_stated(run.get("precision"), stated.precision),
        "recompute": run.get("recompute_granularity") == "full" or stated.full_recompute,
        "epoch_tokens": first_stated(run.get("epoch_tokens")),
    }


def setup_label(columns: dict[str, Any]) -> str | None:
    """recipe.setups' label of the row's setup (`z0` ... `z3_offload_param`, `tp2_pp4_z1`); None
    when the ZeRO stage is not known."""
    if columns["zero_stage"] is None:
        return None
    return label_of_setup(
        columns["zero_stage"],
        columns["offload"],
        columns["offload_param"],
        columns["tensor_parallel"],
        columns["pipeline_parallel"],
    )
