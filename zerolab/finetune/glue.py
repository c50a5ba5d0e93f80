"""A GLUE task by name, as a recipe or `zerolab prep glue` gives it (the tasks themselves are
zerolab.contracts.GLUE_TASKS: the fine-tuning loop reads them too), and where the hub has GLUE."""

from __future__ import annotations

import difflib

from zerolab.contracts import GLUE_TASKS, GlueTask
from zerolab.errors import UserError

HUB_DATASET = "nyu-mll/glue"
"""GLUE on the Hugging Face hub: one configuration per task, named as the task."""


def glue_task(name: str, where: str = "task") -> GlueTask:
    """The task called `name`; UserError naming `where` and the closest task name otherwise."""
    task = GLUE_TASKS.get(name.lower())
    if task is not None:
        return task
    close = difflib.get_close_matches(name.lower(), GLUE_TASKS, n=1)
    hint = f"did you mean `{close[0]}`?" if close else f"GLUE's tasks: {', '.join(GLUE_TASKS)}"
    raise UserError(f"{where}: no GLUE task `{name}`; {hint}")
