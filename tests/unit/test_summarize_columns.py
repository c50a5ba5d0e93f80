"""The summary's columns are declared once (zerolab.summarize.columns): every row holds exactly
the declared keys in their order, docs/summarize.md's table is generated from the declaration,
and what the tables, comparisons and plots show follows it."""

from __future__ import annotations

import json
from pathlib import Path

from zerolab.cli import main
from zerolab.summarize.columns import COLUMNS, DOC_FILE, METRICS, ROW_KEYS, TABLE, current_doc

LOGS = Path(__file__).resolve().parents[1] / "fixtures" / "logs"


def test_docs_summarize_md_is_current():
    assert DOC_FILE.read_text() == current_doc(), "docs/summarize.md is stale: run `make docs`"


def test_every_row_holds_exactly_the_declared_keys_in_order(tmp_path):
    out = tmp_path / "summary"
    assert main(["summarize", str(LOGS / "cpu-engine"), "--out", str(out), "--no-plots"]) == 0
    runs = json.loads((out / "summary.json").read_text())["runs"]
    assert runs and all(list(run) == list(ROW_KEYS) for run in runs)
    header = (out / "summary.csv").read_text().splitlines()[0]
    assert header.split(",") == [key for key in ROW_KEYS if key != "sweep"]  # no sweep: no sweep.KEY
    markdown = (out / "summary.md").read_text().splitlines()[0]
    assert markdown == "| " + " | ".join(column.table_header for column in TABLE) + " |"


def test_metrics_have_a_unit_or_a_unitless_name_and_say_which_way_is_better(capsys):
    assert len({column.key for column in COLUMNS}) == len(COLUMNS)
    assert [column.key for column in METRICS] == [
        "tokens_per_s_per_gpu",
        "ms_per_iter",
        "epoch_time_s",
        "tflops_per_gpu",
        "mfu_pct",
        "max_allocated_GiB",
        "peak_host_GiB",
        "last_loss",
        "val_loss",
        "eval_val_ppl",
        "eval_wikitext_ppl",
        "eval_hellaswag_acc_norm",
        "task_score",
    ]
    runs = [str(LOGS / "cpu-engine" / name) for name in ("final_z0.log", "final_z3.log")]
    assert main(["compare", *runs]) == 0
    printed = capsys.readouterr().out
    for column in METRICS:
        assert (
            f"{column.label} [{column.better_words}]" in printed.replace("\n", " ") or column.label in printed
        )
