"""Before a launch starts ranks: the estimate against the memory of the GPUs the ranks will
use, read from NVML (nvidia-ml-py) where it is installed, else from the engine's torch (the
doctor's cached probe). On CPU, or with no GPU visible, there is nothing to compare."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass

from zerolab.engine.doctor import collect
from zerolab.engine.nvml import Gpus
from zerolab.errors import UserError
from zerolab.estimate import CannotEstimate, estimate
from zerolab.estimate.buffers import CUDA_CONTEXT_GIB
from zerolab.estimate.fit import DOES_NOT_FIT, TIGHT, fit_status
from zerolab.estimate.memory import MemoryEstimate
from zerolab.recipe.job import job_of
from zerolab.recipe.schema import Recipe

MIB_PER_GIB = 1024


def _visible(totals_mib: list[float], ranks: int) -> list[float]:
    """The NVML devices CUDA_VISIBLE_DEVICES leaves to the ranks (the first `ranks` of them)."""
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    if listed is not None:
        try:
            indices = [int(item) for item in listed.split(",") if item.strip()]
        except ValueError:  # UUIDs or MIG names: keep NVML's order
            indices = list(range(len(totals_mib)))
        totals_mib = [totals_mib[i] for i in indices if 0 <= i < len(totals_mib)]
    return totals_mib[:ranks]


def visible_gpu_memory() -> tuple[list[float], str]:
    """(total GiB of each GPU a rank may use, where that was read); empty when none is visible."""
    totals = Gpus().total_MiB()
    if totals:
        return [mib / MIB_PER_GIB for mib in _visible(totals, len(totals))], "NVML"

    devices = (collect(cached=True).get("engine_env") or {}).get("devices") or []
    return [float(device["memory_GiB"]) for device in devices], "the engine's torch"


@dataclass(frozen=True)
class Fit:
    """The estimate of a recipe against the smallest GPU its ranks get on this node."""

    estimate: MemoryEstimate
    gpu_gib: float
    status: str


def fit_on(recipe: Recipe, gpus_gib: list[float]) -> Fit | None:
    """How the recipe fits GPUs of `gpus_gib` (the first procs_per_node of them); None on CPU or
    with no GPU to compare. CannotEstimate when the estimator does not model the recipe."""
    gpus_gib = gpus_gib[: recipe.hardware.procs_per_node]
    if recipe.hardware.device == "cpu" or not gpus_gib:
        return None
    est = estimate(recipe)
    smallest = min(gpus_gib)
    return Fit(est, smallest, fit_status(est.gpu_peak_gib, smallest))


def memory_warning(recipe: Recipe, gpus_gib: list[float], source: str) -> str | None:
    """The warning for launching `recipe` on GPUs of `gpus_gib`, or None when it fits (or there is
    nothing to compare, or the estimator does not model the recipe)."""
    try:
        fit = fit_on(recipe, gpus_gib)
    except CannotEstimate as error:
        return f"no memory estimate before launch: {error}"
    if fit is None:
        return None
    est, smallest = fit.estimate, fit.gpu_gib
    what = (
        f"the estimate for {recipe.name} is {est.gpu_peak_gib:.1f} GiB allocated per GPU at its peak "
        f"({est.peak_stage.peak_phase}), plus about {CUDA_CONTEXT_GIB} GiB of CUDA context, and the "
        f"GPU has {smallest:.1f} GiB ({source})"
    )
    fix = f"`zerolab estimate RECIPE --gpu-memory {smallest:g}` shows setups and micro batches that fit"
    if fit.status == DOES_NOT_FIT:
        return f"{what}: it will likely run out of memory; {fix}"
    if fit.status == TIGHT:
        return f"{what}: it fits only if the allocator wastes almost nothing; {fix}"
    return None


def finetune_fit_problem(recipe: Recipe, gpus_gib: list[float], source: str) -> str | None:
    """A fine-tuning that does not fit the GPUs of `gpus_gib` by the estimate: the refusal's text
    (the keys that shrink it, and the estimate that shows what fits), else None. Fine-tuning asks for
    it to be an error; pretraining only warns (memory_warning)."""
    if not job_of(recipe).refuses_what_does_not_fit:
        return None
    try:
        fit = fit_on(recipe, gpus_gib)
    except CannotEstimate:
        return None
    if fit is None or fit.status != DOES_NOT_FIT:
        return None
    est, smallest = fit.estimate, fit.gpu_gib
    return (
        f"cannot launch {recipe.name}: zerolab estimate puts it at {est.gpu_peak_gib:.1f} GiB allocated "
        f"per GPU at its peak ({est.peak_stage.peak_phase}), and the GPU has {smallest:.1f} GiB ({source}). "
        "Shard or offload more (zero=z2, zero=z3, zero=z3_offload), lower train.micro_batch_size (raising "
        "the gradient accumulation), or set activation_checkpointing=full; `zerolab estimate RECIPE "
        f"--gpu-memory {smallest:g}` shows the setups and micro batches that fit"
    )


def warn_before_launch(recipe: Recipe) -> None:
    """Print `memory_warning` on stderr for the GPUs visible here (nothing on CPU); a fine-tuning
    that does not fit them is a UserError (finetune_fit_problem)."""
    if recipe.hardware.device == "cpu":
        return
    gpus, source = visible_gpu_memory()
    problem = finetune_fit_problem(recipe, gpus, source)
    if problem:
        raise UserError(problem)
    warning = memory_warning(recipe, gpus, source)
    if warning:
        print(f"zerolab: warning: {warning}", file=sys.stderr)
