"""What a resumed run may change. A checkpoint holds the model it was saved with (its shape, the
padded vocabulary, the number format): a resume that changes one is refused before any rank starts,
as is a resume with nothing left to train. The setup it was saved under (the ZeRO stage and
offload, the data-, tensor- and pipeline-parallel sizes) may change where the engine carries the
checkpoint across through DeepSpeed's universal format (`--universal-checkpoint`, the checkpoint
converted once, beside the original): `continuation` says which changes it carries, and why the
others are refused, as measured on the engine (docs/resume.md's table, generated from CHANGES)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from zerolab.files import generated_doc_main, with_section
from zerolab.locations import REPO_ROOT
from zerolab.recipe.length import pretraining_iters
from zerolab.recipe.schema import MODEL_SHAPE_KEYS, Recipe
from zerolab.recipe.setups import setup_label, zero_variant


@dataclass(frozen=True)
class Resume:
    """A launch that continues an earlier run from its last checkpoint."""

    run_dir: Path
    recipe: Recipe
    """The earlier run's resolved recipe (its recipe.yaml)."""
    iteration: int = 0
    """The iteration of the checkpoint it continues."""
    universal: bool = False
    """Whether it continues under another setup, from the checkpoint in DeepSpeed's universal format."""


MODEL: tuple[tuple[str, Callable[[Recipe], Any]], ...] = (
    ("precision", lambda recipe: recipe.precision_name),
    *(
        (f"model.{key}", lambda recipe, key=key: getattr(recipe.model, key))
        for key in MODEL_SHAPE_KEYS
        if key != "vocab_size"  # compared padded, below: the embedding's rows are the padded size
    ),
    ("the padded vocabulary (model.vocab_size, model.make_vocab_size_divisible_by x parallel.tensor)",
     lambda recipe: recipe.padded_vocab_size),
)  # fmt: skip
"""What a checkpoint cannot carry into another value: (what to name, its value in a recipe)."""


def setup_of(recipe: Recipe) -> str:
    """The setup a checkpoint is saved under: the ZeRO setup's name with its parallel sizes."""
    zero = recipe.zero
    label = setup_label(zero.stage, zero.offload_optimizer, zero.offload_param, variant=zero_variant(zero))
    parallel = recipe.parallel
    return f"{label} dp{recipe.data_parallel_size} tp{parallel.tensor} pp{parallel.pipeline}"


@dataclass(frozen=True)
class Change:
    """A kind of setup change, and whether the engine carries a checkpoint across it."""

    name: str
    applies: Callable[[Recipe, Recipe], bool]
    carried: bool
    why: str
    """What was measured (or what the engine documents)."""


def _family(recipe: Recipe) -> str:
    return "ZeRO-3" if recipe.zero.stage == 3 else "ZeRO 1-2"


CHANGES: tuple[Change, ...] = (
    Change(
        "to or from ZeRO stage 0",
        lambda before, after: before.zero.stage == 0 or after.zero.stage == 0,
        False,
        "ZeRO stage 0 (plain data parallelism) keeps no ZeRO optimizer partitions: DeepSpeed's "
        "ds_to_universal finds no `*_optim_states.pt` files to convert, and a ZeRO-0 run given a "
        "universal checkpoint stops at load (measured)",
    ),
    Change(
        "between ZeRO 1-2 and ZeRO-3",
        lambda before, after: _family(before) != _family(after),
        False,
        "DeepSpeed writes and reads the universal checkpoint of ZeRO 1-2 and of ZeRO-3 differently (their "
        "model-state files, their optimizer state): ZeRO-2 -> ZeRO-3 and ZeRO-3 -> ZeRO-2 stop at load "
        "(measured); with the files bridged by hand, ZeRO-3 trained from weights 0.048 off the saved ones",
    ),
    Change(
        "of the tensor-parallel size",
        lambda before, after: before.parallel.tensor != after.parallel.tensor,
        False,
        "with the layout zerolab renders (`--no-pipeline-parallel` at parallel.pipeline=1) the engine's "
        "universal load does not carry it: TP 2 -> 1 stops at load (DeepSpeed merges the two tensor-parallel "
        "model files as for inference), "
        "TP 1 -> 2 trains from weights 0.025 off the saved ones (the loss of the first iteration; "
        "measured)",
    ),
    Change(
        "of the pipeline-parallel size",
        lambda before, after: before.parallel.pipeline != after.parallel.pipeline,
        False,
        "parallel.pipeline=1 renders `--no-pipeline-parallel`, whose weights the engine converts neither to "
        "nor from the pipeline layout (examples_deepspeed/universal_checkpointing/README.md); PP 2 -> 1 "
        "stops at load (measured)",
    ),
    Change(
        "of zero.offload_param (weights offloaded)",
        lambda before, after: bool(before.zero.offload_param) != bool(after.zero.offload_param),
        False,
        "not measured: the table covers ZeRO 0-3 and ZeRO-3 with the optimizer offloaded",
    ),
    Change(
        "within ZeRO 1-2: the stage, the data-parallel size",
        lambda before, after: _family(before) == "ZeRO 1-2",
        True,
        "the losses after it equal the uninterrupted run's within 1e-4 (fp32; measured: "
        "ZeRO-1 DP 2 -> 1, ZeRO-1 -> ZeRO-2, ZeRO-2 DP 2 -> ZeRO-1 DP 1)",
    ),
    Change(
        "within ZeRO-3: the optimizer's offload, the data-parallel size",
        lambda before, after: True,
        True,
        "the loss of the first iteration after it equals the uninterrupted run's (fp32), the "
        "next ones leave it by about 7e-4 (DeepSpeed's ZeRO-3 load of the universal optimizer state; "
        "a resume under the same setup stays exact). Measured: ZeRO-3 DP 2 -> 1, ZeRO-3 -> ZeRO-3 + "
        "offload",
    ),
)
"""Every kind of setup change, the first that applies deciding: refused, or carried by the universal
checkpoint."""


def _moved(before: Recipe, after: Recipe) -> bool:
    """Whether the setup differs in what a checkpoint holds: the ZeRO stage or offload, the parallel
    sizes, and the data-parallel size where the optimizer states are split over it."""
    return setup_of(before) != setup_of(after) and (
        _zero(before) != _zero(after)
        or before.parallel.tensor != after.parallel.tensor
        or before.parallel.pipeline != after.parallel.pipeline
        or (_partitions_optimizer(before) and before.data_parallel_size != after.data_parallel_size)
    )


def _zero(recipe: Recipe) -> tuple[int, bool, bool]:
    zero = recipe.zero
    return zero.stage, bool(zero.offload_optimizer), bool(zero.offload_param)


def change_of(before: Recipe, after: Recipe) -> Change | None:
    """The kind of setup change from `before` to `after`; None when the checkpoint loads as it is."""
    if not _moved(before, after):
        return None
    return next(change for change in CHANGES if change.applies(before, after))


def resumed_facts(resume: Resume | None) -> dict[str, Any]:
    """What run.json records of the checkpoint a run continues (RunFacts' resumed_* fields)."""
    if resume is None:
        return {}
    return {
        "resumed_from": str(resume.run_dir.resolve()),
        "resumed_iteration": resume.iteration,
        "resumed_setup": setup_of(resume.recipe),
    }


def resume_problems(previous: Recipe, recipe: Recipe, checkpoint: int, new_run: str) -> list[str]:
    """Why `recipe` cannot continue the checkpoint at iteration `checkpoint` that a run of
    `previous` saved, suggesting `new_run` (the command that starts over); empty when it can."""
    problems = [
        f"{what}: the checkpoint was saved with {value(previous)}, the overrides give {value(recipe)}; a "
        f"checkpoint holds the model it was saved with: resume without this override, or start a new run: "
        f"{new_run}"
        for what, value in MODEL
        if value(previous) != value(recipe)
    ]
    change = change_of(previous, recipe)
    if change is not None and not change.carried:
        problems.append(
            f"the setup changes {change.name} ({setup_of(previous)} -> {setup_of(recipe)}), which the engine "
            f"cannot continue a checkpoint across: {change.why}. Continue under a setup docs/resume.md lists "
            f"as continued, or start a new run: {new_run}"
        )
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


DOC_FILE = REPO_ROOT / "docs" / "resume.md"
_BEGIN = "<!-- changes: generated from zerolab/recipe/resumption.py by `make docs`; do not edit -->"
_END = "<!-- end of changes -->"


def changes_markdown() -> str:
    """docs/resume.md's table: each kind of setup change, continued or refused, and why."""
    lines = ["| the setup changes | continued? | why |", "|---|---|---|"]
    for change in CHANGES:
        lines.append(f"| {change.name} | {'continued' if change.carried else 'refused'} | {change.why} |")
    return "\n".join(lines) + "\n"


def current_doc() -> str:
    """docs/resume.md with its table as CHANGES says."""
    return with_section(DOC_FILE.read_text(), _BEGIN, _END, changes_markdown())


def main(argv: list[str] | None = None) -> int:
    """Rewrite docs/resume.md's table, or with --check report whether it is stale."""
    return generated_doc_main(DOC_FILE, current_doc, argv)


if __name__ == "__main__":
    sys.exit(main())
