"""Recipes: composable YAML, checked before launch, rendered into the exact
Megatron-DeepSpeed command (launcher, environment, arguments) and DeepSpeed config. Import what
you need from its modules (zerolab.recipe.compose's load_recipe, zerolab.recipe.render's render,
...): importing the package loads none of them."""
