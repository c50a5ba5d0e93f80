"""`zerolab estimate`: what a recipe's setup costs in GPU and host memory and moves between
GPUs per step, before anything runs (docs/estimate.md). One idea per module: the model's
shape on a rank (shape), model states (model_states), activations (activations), buckets and
fixed overhead (buffers), the sum per phase of a step (memory), traffic (communication), what
fits a GPU (fit, plot), the settings it models (support), the measured cases it is checked
against (calibration)."""

from __future__ import annotations

from zerolab.estimate.memory import MemoryEstimate, estimate_memory
from zerolab.estimate.support import unmodelled_settings
from zerolab.recipe.schema import Recipe


class CannotEstimate(Exception):
    """The recipe has settings the estimator does not model; `reasons` names each."""

    def __init__(self, reasons: list[str]) -> None:
        super().__init__("; ".join(reasons))
        self.reasons = reasons


def estimate(recipe: Recipe) -> MemoryEstimate:
    """The memory estimate of a loaded recipe; CannotEstimate when it has unmodelled settings."""
    reasons = unmodelled_settings(recipe)
    if reasons:
        raise CannotEstimate(reasons)
    return estimate_memory(recipe)


__all__ = ["CannotEstimate", "MemoryEstimate", "estimate"]
