"""The escape hatch checked by the engine itself: a recipe's `extra.megatron_args` and
`extra.ds_config` are unknown to the schema, so Megatron's parser and DeepSpeed's config classes
judge the whole render before anything launches (where the engine is set up)."""

from __future__ import annotations

import sys

from zerolab.engine.engine_check import Case, judge, megatron_args_of, refusals
from zerolab.engine.paths import engine_missing
from zerolab.errors import UserError
from zerolab.recipe.job import job_of
from zerolab.recipe.render import Launch
from zerolab.recipe.schema import Recipe


def has_extras(recipe: Recipe) -> bool:
    """Whether the recipe passes settings the schema does not know."""
    return bool(recipe.extra.megatron_args or recipe.extra.ds_config)


def check_extras(recipe: Recipe, launch: Launch, *, required: bool) -> None:
    """Have the engine judge a render with extras; UserError naming what it refused. Without the
    engine: a UserError when `required` (a launch), else a warning on stderr (a dry run)."""
    if not has_extras(recipe):
        return
    if not job_of(recipe).engine_judges_extras:
        print(
            "zerolab: note: a fine-tuning's extra.ds_config is judged by DeepSpeed when the ranks start",
            file=sys.stderr,
        )
        return
    missing = engine_missing()
    if missing:
        if required:
            raise UserError(f"cannot launch: {missing}")
        print(
            "zerolab: warning: extra.megatron_args / extra.ds_config not checked by the engine's parser: "
            f"{missing}",
            file=sys.stderr,
        )
        return
    case = Case(
        name=recipe.name,
        megatron_args=megatron_args_of(launch.argv),
        ds_config=launch.ds_config,
        world_size=recipe.world_size,
        data_parallel=recipe.data_parallel_size,
        vouch=recipe.extra.ds_config,
    )
    refused = refusals(judge([case])[case.name])
    if refused:
        raise UserError(
            f"{recipe.path}: the engine refuses this render with its extra settings "
            f"(extra.megatron_args {recipe.extra.megatron_args}, extra.ds_config {recipe.extra.ds_config}):\n"
            + "\n".join(f"- {line}" for line in refused)
            + "\n    fix: correct or remove the extra settings (Megatron's flags: pretrain_gpt.py --help)"
        )
