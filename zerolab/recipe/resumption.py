"""What a resumed run may change: a checkpoint holds the layout it was saved with (the ZeRO stage,
the tensor, pipeline and, with partitioned optimizer states, data-parallel sizes, the number format
and the model's shape), so a resume that changes one is refused before any rank starts, as is a
resume with nothing left to train. zerolab does not convert checkpoints between layouts."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from zerolab.recipe.length import pretraining_iters
from zerolab.recipe.schema import MODEL_SHAPE_KEYS, Recipe


@dataclass(frozen=True)
class Resume:
    """A launch that continues an earlier run from its last checkpoint."""

    run_dir: Path
    recipe: Recipe
    """The earlier run's resolved recipe (its recipe.yaml)."""


LAYOUT: tuple[tuple[str, Callable[[Recipe], Any]], ...] = (
    ("zero.stage", lambda recipe: recipe.zero.stage),
    ("parallel.tensor", lambda recipe: recipe.parallel.tensor),
    ("parallel.pipeline", lambda recipe: recipe.parallel.pipeline),
    ("precision", lambda recipe: recipe.precision_name),
    *(
        (f"model.{key}", lambda recipe, key=key: getattr(recipe.model, key))
        for key in MODEL_SHAPE_KEYS
        if key != "vocab_size"  # compared padded, below: the embedding's rows are the padded size
    ),
    ("the padded vocabulary (model.vocab_size, model.make_vocab_size_divisible_by)",
     lambda recipe: recipe.padded_vocab_size),
)  # fmt: skip
"""What a checkpoint cannot carry into another value: (what to name, its value in a recipe)."""

DATA_PARALLEL = "the data-parallel size (world size / (parallel.tensor x parallel.pipeline))"


def resume_problems(previous: Recipe, recipe: Recipe, checkpoint: int, new_run: str) -> list[str]:
    """Why `recipe` cannot continue the checkpoint at iteration `checkpoint` that a run of
    `previous` saved, the layout changes suggesting `new_run` (the command that starts over);
    empty when it can."""
    changed = [
        (what, value(previous), value(recipe)) for what, value in LAYOUT if value(previous) != value(recipe)
    ]
    if _partitions_optimizer(previous) and previous.data_parallel_size != recipe.data_parallel_size:
        changed.append((DATA_PARALLEL, previous.data_parallel_size, recipe.data_parallel_size))
    problems = [
        f"{what}: the checkpoint was saved with {before}, the overrides give {after}; a checkpoint holds "
        f"the layout it was saved with: resume without this override, or start a new run: {new_run}"
        for what, before, after in changed
    ]
    iterations = pretraining_iters(recipe)  # a fine-tuning is not resumed (zerolab.recipe.selection)
    if iterations <= checkpoint:
        problems.append(
            f"nothing left to train: the last checkpoint is at iteration {checkpoint} and the recipe trains "
            f"to iteration {iterations}; give train.iters=N with N > {checkpoint} (the total, counting the "
            "iterations already done)"
        )
    return problems


def _partitions_optimizer(recipe: Recipe) -> bool:
    """Whether DeepSpeed splits the optimizer states over the data-parallel ranks, one file each
    (ZeRO 1 to 3, and bf16 at any stage, whose optimizer is ZeRO-1's)."""
    return recipe.zero.stage > 0 or recipe.precision_name == "bf16"
