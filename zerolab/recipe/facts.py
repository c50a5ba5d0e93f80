"""The recipe's facts that a run directory's run.json holds (zerolab.rundir.RunFacts)."""

from __future__ import annotations

from pathlib import Path

from zerolab.errors import UserError
from zerolab.imported import read_manifest
from zerolab.recipe.job import job_of
from zerolab.recipe.schema import Recipe
from zerolab.rundir import RunFacts


def run_facts(recipe: Recipe) -> RunFacts:
    """run.json for a run of `recipe`; a value that is not known (the epoch size without data) is None."""
    model, train, job = recipe.model, recipe.train, job_of(recipe)
    try:
        epoch_tokens: int | None = job.epoch_tokens()
    except UserError:
        epoch_tokens = None
    init_from = init_source = None
    if model.init_from is not None:
        init_from = str(Path(model.init_from).resolve())
        try:
            init_source = read_manifest(Path(model.init_from)).source
        except ValueError:
            init_source = None  # a dry run of a folder not imported yet
    return RunFacts(
        name=recipe.name,
        recipe=recipe.path,
        model=model.name,
        num_layers=model.num_layers,
        hidden_size=model.hidden_size,
        num_attention_heads=model.num_attention_heads,
        seq_length=model.seq_length,
        padded_vocab_size=recipe.padded_vocab_size,
        world_size=recipe.world_size,
        nodes=recipe.hardware.nodes,
        procs_per_node=recipe.hardware.procs_per_node,
        tensor_parallel=recipe.parallel.tensor,
        pipeline_parallel=recipe.parallel.pipeline,
        data_parallel=recipe.data_parallel_size,
        zero_stage=recipe.zero.stage,
        offload_optimizer=recipe.zero.offload_optimizer,
        offload_param=recipe.zero.offload_param,
        recompute_granularity=recipe.activation_checkpointing.granularity,
        attention=model.attention,
        micro_batch_size=train.micro_batch_size,
        global_batch_size=train.global_batch_size,
        gradient_accumulation_steps=recipe.gradient_accumulation_steps,
        precision=recipe.precision_name,
        device=recipe.hardware.device,
        train_iters=job.train_iters(),
        log_interval=train.log_interval,
        epoch_tokens=epoch_tokens,
        init_from=init_from,
        init_source=init_source,
        **job.run_facts(),
    )
