"""GLUE's official metrics, computed with scikit-learn and SciPy as Hugging Face's `evaluate` glue
metric computes them; in the engine's Python, where those libraries are pinned."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from zerolab.contracts import GlueTask


def _functions() -> dict[str, Callable[[Sequence[Any], Sequence[Any]], float]]:
    # scipy, sklearn here, not at the top: only in the engine's environment
    from scipy.stats import pearsonr, spearmanr
    from sklearn.metrics import accuracy_score, f1_score, matthews_corrcoef

    return {
        "accuracy": lambda predicted, labels: accuracy_score(labels, predicted),
        "f1": lambda predicted, labels: f1_score(labels, predicted),
        "matthews_correlation": lambda predicted, labels: matthews_corrcoef(labels, predicted),
        "pearson": lambda predicted, labels: pearsonr(predicted, labels)[0],
        "spearmanr": lambda predicted, labels: spearmanr(predicted, labels)[0],
    }


def glue_metrics(task: GlueTask, predicted: Sequence[Any], labels: Sequence[Any]) -> dict[str, float]:
    """`task`'s official metrics of `predicted` (class ids; STS-B's scores) against `labels`."""
    functions = _functions()
    return {name: float(functions[name](predicted, labels)) for name in task.metrics}
