"""What `render`, `show` and `launch --dry-run` print."""

from __future__ import annotations

import json
import sys

from zerolab.errors import UserError
from zerolab.recipe.inputs import check_inputs
from zerolab.recipe.length import train_iters
from zerolab.recipe.render import DS_CONFIG_PLACEHOLDER, Launch
from zerolab.recipe.schema import Recipe
from zerolab.recipe.yaml_io import dump_yaml


def summary_line(recipe: Recipe) -> str:
    """One line: model, parallel layout, batch arithmetic, ZeRO and precision."""
    return (
        f"{recipe.model.name} | world {recipe.world_size} = {recipe.hardware.nodes} node(s) x "
        f"{recipe.hardware.procs_per_node} | tensor {recipe.parallel.tensor} "
        f"x pipeline {recipe.parallel.pipeline} "
        f"x data {recipe.data_parallel_size} | global batch {recipe.train.global_batch_size} = micro "
        f"{recipe.train.micro_batch_size} x grad-accum {recipe.gradient_accumulation_steps} x data "
        f"{recipe.data_parallel_size} | ZeRO {recipe.zero.stage}"
        f"{' + CPU optimizer offload' if recipe.zero.offload_optimizer else ''} | {recipe.precision_name} | "
        f"{recipe.hardware.device} | {train_iters(recipe)} iterations"
    )


def render_text(recipe: Recipe, launch: Launch) -> str:
    """The dry-run text: a comment header, the shell command, then the ds_config JSON."""
    return (
        f"# {recipe.path}: {recipe.description}\n"
        f"# {summary_line(recipe)}\n"
        f"# Save the DeepSpeed config below as {DS_CONFIG_PLACEHOLDER}, then run from the repository root:\n"
        f"{launch.shell()}\n\n"
        f"# {DS_CONFIG_PLACEHOLDER}\n"
        f"{json.dumps(launch.ds_config, indent=2)}\n"
    )


def resolved_yaml(recipe: Recipe) -> str:
    """The fully resolved recipe as YAML, headed by the values derived from it (as comments)."""
    header = (
        f"# {recipe.path}, fully resolved\n"
        f"# derived: world_size={recipe.world_size} data_parallel={recipe.data_parallel_size} "
        f"gradient_accumulation_steps={recipe.gradient_accumulation_steps} "
        f"padded_vocab_size={recipe.padded_vocab_size} train_iters={_iters_or_reason(recipe)}\n"
    )
    return header + dump_yaml(recipe.model_dump(mode="json"))


def warn_missing_inputs(recipe: Recipe) -> None:
    """Missing data or tokenizer files as warnings on stderr (a dry run still prints)."""
    for problem in check_inputs(recipe):
        print(f"zerolab: warning: {problem}", file=sys.stderr)


def _iters_or_reason(recipe: Recipe) -> str:
    try:
        return str(train_iters(recipe))
    except UserError:
        return "unknown until the dataset is prepared"
