"""`zerolab eval`: score a model on the tasks asked, in the engine's Python (rank/score_hf.py;
HellaSwag by lm-evaluation-harness with rank/score_lm_eval.py when asked), and keep the scores
of a run's checkpoint in its run directory (eval.json, zerolab.rundir)."""

from __future__ import annotations

import json
import tempfile
from contextlib import nullcontext
from pathlib import Path

from zerolab.contracts import rank_script
from zerolab.engine.scripts import run_engine_script
from zerolab.evaluate.target import Model, hf_model
from zerolab.evaluate.tasks import Data, Task, task_inputs
from zerolab.export.run import Exported
from zerolab.rundir import Scorer, TaskScore, now_iso, write_eval

SCRIPTS: dict[Scorer, Path] = {
    "zerolab": rank_script("score_hf"),
    "lm-eval": rank_script("score_lm_eval"),
}


def evaluate(
    target: str,
    tasks: list[Task],
    *,
    data: Data = "hub",
    iteration: int | None = None,
    limit: int | None = None,
    stride: int | None = None,
    hellaswag_scorer: Scorer = "zerolab",
    progress: bool = True,
    exported: Exported | None = None,
) -> tuple[Model, dict[str, TaskScore]]:
    """Score TARGET on `tasks` (HellaSwag by `hellaswag_scorer`, the rest by zerolab); returns the
    model scored and each task's score (also written to the run's eval.json when TARGET is a run or
    checkpoint). `exported`: TARGET's checkpoint exported already (export_run), scored as it is."""
    scorers: dict[str, Scorer] = {
        task: hellaswag_scorer if task == "hellaswag" else "zerolab" for task in tasks
    }
    scored = (
        nullcontext(Model(str(exported.out), exported.run_dir, exported.iteration))
        if exported is not None
        else hf_model(target, iteration)
    )
    with scored as model:
        inputs = {task: task_inputs(task, data, model.run_dir, limit, stride) for task in tasks}
        output: dict = {}
        for scorer in dict.fromkeys(scorers.values()):
            mine = {task: inputs[task] for task in tasks if scorers[task] == scorer}
            output |= _score(scorer, model.source, mine, progress)
    when = now_iso()
    scores = {
        task: TaskScore(
            metrics=output[task]["metrics"],
            iteration=model.iteration,
            data="run" if task == "val" else data,
            examples=output[task]["examples"],
            tokens=output[task].get("tokens"),
            scorer=scorers[task],
            evaluated=when,
        )
        for task in tasks
    }
    if model.run_dir is not None:
        write_eval(model.run_dir, scores)
    return model, scores


def _score(scorer: Scorer, model: str, inputs: dict[str, dict], progress: bool) -> dict:
    """Each task's result from `scorer`'s script in the engine's Python."""
    with tempfile.TemporaryDirectory(prefix="zerolab-score-") as work:
        result_file = Path(work) / "result.json"
        request = {"model": model, "tasks": inputs, "result": str(result_file)}
        run_engine_script(SCRIPTS[scorer], request, Path(work), name="eval", echo=progress)
        return json.loads(result_file.read_text())
