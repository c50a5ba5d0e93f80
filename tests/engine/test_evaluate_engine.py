"""`zerolab eval` and `zerolab generate` on the session's shared tiny GPT-2 runs (real engine
checkpoints, exported on the fly): the scores land in the run's eval.json and in `zerolab
summarize`, a run and its exported folder score the same, lm-evaluation-harness scores HellaSwag as
zerolab does from the same prompts as its own task's, the validation split is Megatron's own, and
sampling is reproducible by its seed. Skipped, with the reason, without the engine."""

from __future__ import annotations

import itertools
import json
import subprocess

import pytest
from engine_patch_helpers import run_on_engine
from evaluate_helpers import FIRST_HELLASWAG_ROW

from zerolab.cli import main
from zerolab.evaluate.tasks import hellaswag_record
from zerolab.recipe.megatron_split import split_ranges

SPLIT = """
import json, sys
from megatron.data.dataset_utils import get_train_valid_test_split_
cases = json.loads(sys.argv[1])
print(json.dumps([get_train_valid_test_split_(split, size) for split, size in cases]))
"""

LM_EVAL_PROMPTS = """
import json, sys
import datasets
from lm_eval.tasks.hellaswag.utils import process_docs
rows = datasets.Dataset.from_list(json.loads(sys.argv[1]))
print(json.dumps([[doc["query"], doc["choices"], doc["gold"]] for doc in process_docs(rows)]))
"""
HELLASWAG_ROWS = [
    FIRST_HELLASWAG_ROW,
    {  # WikiHow-shaped: markers, no ctx_b, spaces to clean
        "activity_label": "Home and Garden",
        "ctx_a": "[header] How to clean a grill [title] Heat the grill. [step] Turn the burners up  high.",
        "ctx_b": "",
        "endings": ["[substeps] Close the lid. ", " Scrub the grates [title] Use a brush.", "x", "[step] y"],
        "label": "1",
    },
    {  # ctx_b a phrase whose first word capitalize() changes, and one it lowers
        "activity_label": "Skiing",
        "ctx_a": "A skier stands at the top.",
        "ctx_b": "the skier then ADJUSTS",
        "endings": ["goggles.", "poles.", "skis.", "a hat."],
        "label": "0",
    },
]


@pytest.fixture(scope="module")
def scored(trained):
    """The ZeRO-1 run scored on every task on the shipped samples."""
    run = trained("z1").run_dir
    argv = ["eval", str(run), "--task", "val,wikitext,hellaswag", "--data", "sample", "--limit", "40"]
    assert main(argv) == 0
    return run


def test_a_runs_scores_are_kept_and_summarized(scored, tmp_path, capsys):
    kept = json.loads((scored / "eval.json").read_text())["tasks"]
    assert sorted(kept) == ["hellaswag", "val", "wikitext"]
    assert {task: kept[task]["iteration"] for task in kept} == {"hellaswag": 3, "val": 3, "wikitext": 3}
    assert kept["wikitext"]["data"] == "sample" and kept["val"]["data"] == "run"
    for task in ("val", "wikitext"):
        loss, ppl = kept[task]["metrics"]["loss"], kept[task]["metrics"]["ppl"]
        assert 5.0 < loss < 11.5 and abs(ppl - 2.718281828459045**loss) <= 1e-6 * ppl  # 3 steps from random
    assert kept["hellaswag"]["examples"] == 40 and 0.05 <= kept["hellaswag"]["metrics"]["acc_norm"] <= 0.5
    assert main(["summarize", str(scored), "--out", str(tmp_path / "summary"), "--no-plots"]) == 0
    (row,) = json.loads((tmp_path / "summary" / "summary.json").read_text())["runs"]
    assert row["eval_wikitext_ppl"] == pytest.approx(kept["wikitext"]["metrics"]["ppl"])
    assert row["eval_hellaswag_acc_norm"] == kept["hellaswag"]["metrics"]["acc_norm"]
    assert row["eval_iteration"] == 3
    assert "(sample)" in (tmp_path / "summary" / "summary.md").read_text()


@pytest.fixture(scope="module")
def exported(scored, tmp_path_factory):
    """The scored run's checkpoint exported to a Hugging Face folder."""
    out = tmp_path_factory.mktemp("exported") / "hf"
    assert main(["export", str(scored), "--out", str(out)]) == 0
    return out


def test_an_exported_folder_scores_as_its_run(scored, exported, capsys):
    argv = ["eval", str(exported), "--task", "wikitext,hellaswag", "--data", "sample", "--limit", "40"]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    kept = json.loads((scored / "eval.json").read_text())["tasks"]
    assert f"{kept['wikitext']['metrics']['ppl']:.4f}" in printed
    assert f"{kept['hellaswag']['metrics']['acc_norm']:.4f}" in printed
    assert not (exported / "eval.json").exists()  # a model folder is not a run: nothing kept there


def test_lm_evaluation_harness_scores_hellaswag_as_zerolab_does(scored, tmp_path, capsys):
    zerolabs = json.loads((scored / "eval.json").read_text())["tasks"]["hellaswag"]
    argv = [
        "eval",
        str(scored),
        "--task",
        "hellaswag",
        "--data",
        "sample",
        "--limit",
        "40",
        "--scorer",
        "lm-eval",
    ]
    assert main(argv) == 0
    lm_evals = json.loads((scored / "eval.json").read_text())["tasks"]["hellaswag"]
    assert (zerolabs["scorer"], lm_evals["scorer"]) == ("zerolab", "lm-eval")
    assert sorted(lm_evals["metrics"]) == ["acc", "acc_norm", "acc_norm_chars"]
    assert lm_evals["metrics"] == zerolabs["metrics"] and lm_evals["examples"] == 40
    assert main(["summarize", str(scored), "--out", str(tmp_path / "summary"), "--no-plots"]) == 0
    (row,) = json.loads((tmp_path / "summary" / "summary.json").read_text())["runs"]
    assert row["eval_hellaswag_scorer"] == "lm-eval"
    assert row["eval_hellaswag_acc_norm_chars"] == lm_evals["metrics"]["acc_norm_chars"]


def test_zerolabs_hellaswag_prompts_are_lm_evaluation_harness_own(engine):
    _, python = engine
    done = subprocess.run(
        [str(python), "-c", LM_EVAL_PROMPTS, json.dumps(HELLASWAG_ROWS)],
        capture_output=True,
        text=True,
        check=True,
    )
    theirs = json.loads(done.stdout.strip().splitlines()[-1])
    ours = [hellaswag_record(row) for row in HELLASWAG_ROWS]
    assert [[record["context"], record["endings"], record["label"]] for record in ours] == theirs
    assert ours[2]["context"] == "Skiing: A skier stands at the top. The skier then adjusts"


def test_the_validation_documents_are_the_engines_own_split(engine):
    cases = [["98,2,0", 151], ["969,30,1", 1000], ["1", 7], ["90,10", 3], ["50,50,0", 9], ["2,1,1", 13],
             ["969, 30, 1", 1000], ["90/10", 7], ["0.9, 0.05,0.05", 151], ["98,1,1,5", 151]]  # fmt: skip
    printed = run_on_engine(engine, SPLIT, json.dumps(cases))
    engines = json.loads(printed.strip().splitlines()[-1])
    for (split, size), bounds in zip(cases, engines, strict=True):
        assert split_ranges(split, size) == list(itertools.pairwise(bounds)), (split, size)


def test_sampling_is_reproducible_by_its_seed(exported, capsys):
    capsys.readouterr()
    run = str(exported)
    texts = []
    for seed in (7, 7, 8):
        assert (
            main(["generate", run, "The capital of France is", "--max-new-tokens", "12", "--seed", str(seed)])
            == 0
        )
        texts.append(capsys.readouterr().out)
    assert texts[0] == texts[1] != texts[2]
    assert all(text.startswith("The capital of France is") for text in texts)
    greedy = []
    for seed in ("1", "2"):
        argv = ["generate", run, "Hello", "--temperature", "0", "--max-new-tokens", "5", "--seed", seed]
        assert main(argv) == 0
        greedy.append(capsys.readouterr().out)
    assert greedy[0] == greedy[1]  # greedy: the likeliest token each step, whatever the seed
    assert main(["generate", run, "Hello", "--temperature", "0", "--samples", "2"]) == 2
    assert "greedy decoding gives one text" in capsys.readouterr().err
