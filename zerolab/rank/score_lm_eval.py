"""Scores HellaSwag with lm-evaluation-harness (`zerolab eval --scorer lm-eval`), in the engine's
Python: `python score_lm_eval.py REQUEST.json`. The request, written by zerolab/evaluate/run.py as
for score_hf.py, names the model folder, the `hellaswag` task's docs (zerolab's records: `context`,
`endings`, `label`, as lm-evaluation-harness's own `hellaswag` task prompts them) and the file the
result goes to.

lm-evaluation-harness tokenizes, batches and computes every ending's log-likelihood (its `HFLM`,
fp32 on CPU, of the model score_hf.load_gpt2 loaded, its weights checked to cover the model) and
reports acc and acc_norm; the accuracies kept are `choice_metrics` of its
log-likelihoods (score_hf.py, the same as zerolab's scorer), checked equal to the two it reports."""

from __future__ import annotations

import json
import logging
import math
import sys
from pathlib import Path

from zerolab.rank.collector import collector_paused

with collector_paused():
    from score_hf import choice_metrics, load_gpt2

    from zerolab.rank.prompt_exit import exit_now

    try:
        import datasets
        import transformers
        from lm_eval.evaluator import evaluate
        from lm_eval.models.huggingface import HFLM
        from lm_eval.tasks import TaskManager
    except ImportError as error:
        print(
            f"zerolab eval: --scorer lm-eval needs lm-evaluation-harness in the engine's Python ({error}); "
            "`make setup` installs the version pinned in zerolab/engine/pins.toml, or use --scorer zerolab",
            file=sys.stderr,
        )
        sys.exit(2)

TASK = "zerolab_hellaswag"
REPORTED = {"acc,none": "acc", "acc_norm,none": "acc_norm_chars"}
"""lm-evaluation-harness's result keys, and the choice_metrics each must equal."""


def _task(docs_file: Path) -> dict:
    """lm-evaluation-harness's `hellaswag` task over zerolab's records (already its prompts)."""
    return {
        "task": TASK,
        "dataset_path": "json",
        "dataset_kwargs": {"data_files": {"validation": str(docs_file)}},
        "validation_split": "validation",
        "output_type": "multiple_choice",
        "doc_to_text": "{{context}}",
        "doc_to_target": "{{label}}",
        "doc_to_choice": "{{endings}}",
        "metric_list": [
            {"metric": "acc", "aggregation": "mean", "higher_is_better": True},
            {"metric": "acc_norm", "aggregation": "mean", "higher_is_better": True},
        ],
    }


def main() -> None:
    request_file = Path(sys.argv[1])
    request = json.loads(request_file.read_text(encoding="utf-8"))
    docs = request["tasks"]["hellaswag"]["docs"]
    docs_file = request_file.with_name("hellaswag_docs.jsonl")
    docs_file.write_text("".join(json.dumps(doc) + "\n" for doc in docs), encoding="utf-8")
    logging.getLogger("lm_eval").setLevel(logging.WARNING)
    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    datasets.disable_progress_bars()

    # loaded by zerolab's loader, which refuses weights that do not cover the model, and handed over
    gpt2, tokenizer = load_gpt2(request["model"], "eval")
    logging.getLogger("lm_eval").setLevel(logging.ERROR)  # its warning that the model came loaded
    model = HFLM(pretrained=gpt2, tokenizer=tokenizer, batch_size=8)
    logging.getLogger("lm_eval").setLevel(logging.WARNING)
    tasks = TaskManager(include_defaults=False).load([_task(docs_file)])  # no index of its own tasks
    output = evaluate(model, tasks, log_samples=True, bootstrap_iters=0, verbosity="WARNING")
    answers = []
    for sample in sorted(output["samples"][TASK], key=lambda sample: sample["doc_id"]):
        doc = docs[sample["doc_id"]]
        answers.append(
            {
                "loglikelihoods": [loglikelihood for loglikelihood, _ in sample["filtered_resps"]],
                "tokens": [len(model._encode_pair(*pair)[1]) for pair in sample["arguments"]],
                "characters": [len(ending) for ending in doc["endings"]],
                "label": int(sample["target"]),
            }
        )
    metrics = choice_metrics(answers)
    reported = output["results"][TASK]
    for key, metric in REPORTED.items():
        if not math.isclose(reported[key], metrics[metric], abs_tol=1e-9):
            print(
                f"zerolab eval: lm-evaluation-harness reports {key.split(',')[0]} {reported[key]} where its "
                f"log-likelihoods give {metrics[metric]}: a version zerolab does not read (see pins.toml)",
                file=sys.stderr,
            )
            sys.exit(2)
    result = {"hellaswag": {"metrics": metrics, "examples": len(answers)}}
    Path(request["result"]).write_text(json.dumps(result), encoding="utf-8")


if __name__ == "__main__":
    main()
    exit_now(0)
