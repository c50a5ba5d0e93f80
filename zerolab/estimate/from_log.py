"""The recipe a Megatron log's argument dump (and DeepSpeed config dump) describes, so that a
plain log can be estimated: `zerolab summarize` puts the estimate next to the log's measured
memory. Only what the estimator models is accepted; anything else is a reason, never a guess."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from zerolab.logs.config_dump import convert
from zerolab.logs.parse import ParsedLog
from zerolab.logs.settings import LogSettings, read_settings, zero_section
from zerolab.recipe.checks import check_recipe
from zerolab.recipe.compose import model_name_of_shape
from zerolab.recipe.schema import Recipe

REQUIRED = (
    "num_layers",
    "hidden_size",
    "num_attention_heads",
    "seq_length",
    "micro_batch_size",
    "global_batch_size",
    "padded_vocab_size",
)

UNMODELLED = {
    "swiglu": "SwiGLU MLP",
    "sequence_parallel": "sequence parallelism",
    "use_flash_attn": "flash attention",
    "use_flash_attn_v2": "flash attention",
    "use_flash_attn_triton": "flash attention",
    "use_rotary_position_embeddings": "rotary position embeddings",
    "untie_embeddings_and_output_weights": "an untied output layer",
    "fp16_lm_cross_entropy": "a 16-bit cross entropy",
    "fp32_residual_connection": "fp32 residual connections",
    "use_distributed_optimizer": "Megatron's distributed optimizer",
    "virtual_pipeline_model_parallel_size": "interleaved pipeline stages",
    "num_experts": "mixture of experts",
}
"""Arguments that change memory in ways the estimator does not model, when set (not False/None/1)."""


def _is_set(value: Any) -> bool:
    if isinstance(value, str) and value.startswith("[") and value.endswith("]"):
        value = [convert(item.strip()) for item in value[1:-1].split(",") if item.strip()]
    if isinstance(value, list):
        return any(_is_set(item) for item in value)
    if isinstance(value, bool):
        return value
    return value not in (None, 0, 1, "None", "")


def _zero_section(settings: LogSettings, ds_json: dict[str, Any]) -> dict[str, Any]:
    stage = settings.zero_stage or 0
    zero_json = zero_section(ds_json) or {}
    section: dict[str, Any] = {
        "stage": stage,
        "offload_optimizer": bool(settings.offload_optimizer),
        "offload_param": bool(settings.offload_param),
        # DeepSpeed's own defaults where the config does not say (overlap is off at stages 1-2)
        "overlap_comm": bool(zero_json.get("overlap_comm", stage == 3)),
        "contiguous_gradients": bool(zero_json.get("contiguous_gradients", True)),
    }
    for key in ("reduce_bucket_size", "allgather_bucket_size"):
        if isinstance(zero_json.get(key), int | float):
            section[key] = int(zero_json[key])
    return section


def _checkpointing(args: dict[str, Any]) -> dict[str, Any]:
    if args.get("recompute_granularity") in ("full", "selective"):
        section = {"granularity": args["recompute_granularity"]}
        if args["recompute_granularity"] == "full":
            section |= {
                "method": args.get("recompute_method") or "uniform",
                "num_layers": args.get("recompute_num_layers") or 1,
            }
        return section
    if not args.get("checkpoint_activations"):
        return {"granularity": "none"}
    section = {
        "granularity": "full",
        "method": "uniform",
        "num_layers": args.get("checkpoint_num_layers") or 1,
    }
    if args.get("deepspeed_activation_checkpointing"):
        section |= {
            "implementation": "deepspeed",
            "partition_activations": bool(args.get("partition_activations")),
            "contiguous_memory": bool(args.get("contigious_checkpointing")),
            "cpu_checkpointing": bool(args.get("checkpoint_in_cpu")),
        }
    return section


def recipe_from_log(log: ParsedLog) -> tuple[Recipe | None, list[str]]:
    """(the recipe, []) when the log states every setting the estimate needs and nothing it
    cannot model; otherwise (None, the reasons)."""
    args = log.config.args
    stated = read_settings(log)
    missing = [key for key in REQUIRED if getattr(stated, key) is None]
    if missing:
        return None, [f"the log's argument dump does not state {', '.join(missing)}"]
    if args.get("deepspeed") is not True:
        return None, [
            "the run did not use DeepSpeed (Megatron's own optimizer and schedules are not modelled)"
        ]
    reasons = [f"{what} ({key})" for key, what in UNMODELLED.items() if _is_set(args.get(key))]
    hidden, heads = stated.hidden_size, stated.num_attention_heads
    if stated.ffn_hidden_size not in (None, 4 * hidden):
        reasons.append(f"an MLP of {stated.ffn_hidden_size} (the estimate assumes 4 x hidden = {4 * hidden})")
    if stated.kv_channels not in (None, hidden // heads):
        reasons.append(f"kv_channels {stated.kv_channels} (the estimate assumes hidden / heads)")
    if reasons:
        return None, reasons
    if stated.world_size is None:
        return None, ["the log does not state the world size"]
    shape = {key: getattr(stated, key) for key in ("num_layers", "hidden_size", "num_attention_heads")}
    positions = stated.max_position_embeddings or stated.seq_length
    mapping = {
        "model": {
            "name": model_name_of_shape(shape | {"max_position_embeddings": positions}),
            **shape,
            "seq_length": stated.seq_length,
            "max_position_embeddings": positions,
            "vocab_size": stated.padded_vocab_size,
            "make_vocab_size_divisible_by": 1,
            "attention_dropout": args.get("attention_dropout", 0.1),
            "hidden_dropout": args.get("hidden_dropout", 0.1),
        },
        "parallel": {"tensor": stated.tensor_parallel or 1, "pipeline": stated.pipeline_parallel or 1},
        "zero": _zero_section(stated, log.config.ds_json),
        "activation_checkpointing": _checkpointing(args),
        "precision": {"fp16": stated.precision == "fp16", "bf16": stated.precision == "bf16"},
        "train": {
            "micro_batch_size": stated.micro_batch_size,
            "global_batch_size": stated.global_batch_size,
            "iters": args.get("train_iters") or 1,
        },
        "hardware": {
            "device": "cpu" if args.get("distributed_backend") == "gloo" else "cuda",
            "nodes": 1,
            "procs_per_node": stated.world_size,
        },
    }
    try:
        recipe = Recipe.model_validate(mapping)
    except ValidationError as error:
        return None, [f"the log's settings are not a valid recipe: {error.errors()[0]['msg']}"]
    recipe._name = log.path.stem
    problems = check_recipe(recipe, rendezvous_known=False, tokenizer_known=False)
    if problems:
        return None, [problem.message for problem in problems]
    return recipe, []
