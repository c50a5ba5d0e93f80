"""Recipes: composable YAML, checked before launch, rendered into the exact
Megatron-DeepSpeed command (launcher, environment, arguments) and DeepSpeed config."""

from zerolab.recipe.compose import load_recipe
from zerolab.recipe.facts import run_facts
from zerolab.recipe.inputs import check_inputs
from zerolab.recipe.render import RUN_DIR_PLACEHOLDER, Launch, render
from zerolab.recipe.schema import Recipe
from zerolab.recipe.yaml_io import dump_yaml

__all__ = [
    "RUN_DIR_PLACEHOLDER",
    "Launch",
    "Recipe",
    "check_inputs",
    "dump_yaml",
    "load_recipe",
    "render",
    "run_facts",
]
