"""The nine GLUE tasks as Hugging Face's run_glue.py reads them: each task's sentence columns, its
label count (STS-B: one regression output), the validation splits it is scored on and its official
metrics (GLUE's: CoLA Matthews correlation, STS-B Pearson and Spearman, MRPC and QQP F1 and
accuracy, the rest accuracy; MNLI on its matched and mismatched validation sets). Standard library
only: zerolab's checks and the training loop in the engine's Python both read it."""

from __future__ import annotations

import difflib
from dataclasses import dataclass

from zerolab.errors import UserError

HUB_DATASET = "nyu-mll/glue"
"""GLUE on the Hugging Face hub: one configuration per task, named as the task."""


@dataclass(frozen=True)
class GlueTask:
    """One GLUE task."""

    name: str
    sentence_keys: tuple[str, ...]
    """The columns run_glue.py tokenizes, as one sequence or a pair."""
    num_labels: int
    """Classes; 1 for STS-B's similarity score (regression)."""
    metrics: tuple[str, ...]
    """The official metrics, as metrics.glue_metrics names them."""
    eval_splits: tuple[str, ...] = ("validation",)

    @property
    def is_regression(self) -> bool:
        """Whether the label is a score (STS-B) rather than a class."""
        return self.num_labels == 1


TASKS: dict[str, GlueTask] = {
    task.name: task
    for task in (
        GlueTask("cola", ("sentence",), 2, ("matthews_correlation",)),
        GlueTask("sst2", ("sentence",), 2, ("accuracy",)),
        GlueTask("mrpc", ("sentence1", "sentence2"), 2, ("f1", "accuracy")),
        GlueTask("qqp", ("question1", "question2"), 2, ("f1", "accuracy")),
        GlueTask("stsb", ("sentence1", "sentence2"), 1, ("pearson", "spearmanr")),
        GlueTask(
            "mnli",
            ("premise", "hypothesis"),
            3,
            ("accuracy",),
            ("validation_matched", "validation_mismatched"),
        ),
        GlueTask("qnli", ("question", "sentence"), 2, ("accuracy",)),
        GlueTask("rte", ("sentence1", "sentence2"), 2, ("accuracy",)),
        GlueTask("wnli", ("sentence1", "sentence2"), 2, ("accuracy",)),
    )
}


def glue_task(name: str, where: str = "task") -> GlueTask:
    """The task called `name`; UserError naming `where` and the closest task name otherwise."""
    task = TASKS.get(name.lower())
    if task is not None:
        return task
    close = difflib.get_close_matches(name.lower(), TASKS, n=1)
    hint = f"did you mean `{close[0]}`?" if close else f"GLUE's tasks: {', '.join(TASKS)}"
    raise UserError(f"{where}: no GLUE task `{name}`; {hint}")
