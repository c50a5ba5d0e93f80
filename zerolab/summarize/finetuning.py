"""A fine-tuning run in a summary: its per-step records (finetune.jsonl, zerolab.finetune.records)
stand for the iteration lines a pretraining log prints, so that throughput, step time, epoch time
and the loss curve are computed as for pretraining; its task's official metric after the last
epoch, per validation split, becomes the row's score."""

from __future__ import annotations

import math
from typing import Any, NamedTuple

from zerolab.errors import UserError
from zerolab.finetune.glue import glue_task
from zerolab.logs.parse import ParsedLog


def records_as_iterations(log: ParsedLog, records: list[dict[str, Any]], world_size: int | None) -> None:
    """Add each `train` record to `log` as an iteration line (step, ms, samples/s, tokens/s per rank,
    loss) and the records' step count as its training length."""
    for record in records:
        if record.get("kind") != "train":
            continue
        tokens = _number(record.get("tokens_per_s"))
        values = {
            "iteration": _number(record.get("step")),
            "ms_per_iter": _number(record.get("step_ms")),
            "samples_per_s": _number(record.get("samples_per_s")),
            "tokens_per_s_per_gpu": tokens / world_size if world_size else math.nan,
            "loss": _number(record.get("loss")),
        }
        if not math.isfinite(values["iteration"]):
            continue
        for column, series in log.iterations.items():
            series.append(values.get(column, math.nan))
        steps = record.get("steps")
        if isinstance(steps, int) and steps > 0:
            log.train_iters = steps


class TaskResult(NamedTuple):
    """The row's task columns: the GLUE task, its official metric (the first of them: CoLA's Matthews
    correlation, MRPC's F1...) and that metric on the first validation split after the last epoch,
    and every split's last scores ({split: {metric: value}})."""

    task: str | None
    metric: str | None
    score: float | None
    scores: dict[str, dict[str, Any]] | None


def task_results(task: str | None, records: list[dict[str, Any]]) -> TaskResult:
    """A fine-tuning run's task columns from its records (all None for pretraining)."""
    last: dict[str, dict[str, Any]] = {}
    for record in records:
        if record.get("kind") == "eval" and isinstance(record.get("split"), str):
            last[record["split"]] = {
                key: value
                for key, value in record.items()
                if key not in ("kind", "split", "step", "epoch") and isinstance(value, int | float)
            }
    try:
        found = glue_task(task) if task else None
    except UserError:
        found = None
    metric = found.metrics[0] if found else None
    first = next((last[split] for split in (found.eval_splits if found else ()) if split in last), None)
    score = first.get(metric) if first and metric else None
    return TaskResult(
        task=task,
        metric=metric if score is not None else None,
        score=score if isinstance(score, int | float) and math.isfinite(score) else None,
        scores=last or None,
    )


def _number(value: Any) -> float:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else math.nan
