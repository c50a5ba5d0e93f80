"""The recipe's facts that a run directory's run.json holds (zerolab.rundir.RunFacts): a key of
the model, zero, train and hardware blocks is taken as the recipe states it where run.json holds it
under the same name; the others are derived here."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from zerolab.errors import UserError
from zerolab.imported import read_manifest
from zerolab.recipe.job import job_of
from zerolab.recipe.schema import Recipe
from zerolab.rundir import RunFacts


def _same_named(recipe: Recipe) -> dict[str, Any]:
    """The keys of the recipe's model, zero, train and hardware blocks that run.json holds under
    the same name (`model.num_layers`: `num_layers`), as the recipe states them."""
    blocks = (recipe.model, recipe.zero, recipe.train, recipe.hardware)
    return {key: value for block in blocks for key, value in block if key in RunFacts.model_fields}


def run_facts(recipe: Recipe) -> RunFacts:
    """run.json for a run of `recipe`; a value that is not known (the epoch size without data) is None."""
    model, job = recipe.model, job_of(recipe)
    try:
        epoch_tokens: int | None = job.epoch_tokens()
    except UserError:
        epoch_tokens = None
    try:
        iters: int | None = job.train_iters()
    except UserError:
        if not job.input_problems():
            raise  # the data is there and cannot give the length: refused
        iters = None  # epochs of data not prepared yet: counted at launch, which refuses without it
    init_from = init_source = None
    if model.init_from is not None:
        init_from = str(Path(model.init_from).resolve())
        try:
            init_source = read_manifest(Path(model.init_from)).source
        except ValueError:
            init_source = None  # a dry run of a folder not imported yet
    derived = dict(
        name=recipe.name,
        recipe=recipe.path,
        model=model.name,
        padded_vocab_size=recipe.padded_vocab_size,
        world_size=recipe.world_size,
        tensor_parallel=recipe.parallel.tensor,
        pipeline_parallel=recipe.parallel.pipeline,
        data_parallel=recipe.data_parallel_size,
        zero_stage=recipe.zero.stage,
        recompute_granularity=recipe.activation_checkpointing.granularity,
        gradient_accumulation_steps=recipe.gradient_accumulation_steps,
        precision=recipe.precision_name,
        train_iters=iters,
        epoch_tokens=epoch_tokens,
        init_from=init_from,
        init_source=init_source,
        master_port=None,  # the port the launch used: the launch plan records it
        **job.run_facts(),
    )
    return RunFacts(**(_same_named(recipe) | derived))
