"""The speed switches and the ladder on the real engine (tiny GPT-2, CPU). Each switch proven equal
is on by default, so every shared run trains with them; here the same runs train with them off and
must reach the same losses (fp32: 1e-5; bf16: the matrix's bf16 tolerance), across the layouts they
touch: pipeline parallel, bf16, and data parallel under ZeRO-2 with sdpa attention and dropout (the
same dropout draws; the RNG fork host_trims skips only without dropout). Tensor parallel (where
async_batch_copy falls back to the engine's broadcast) with them off, and compiled_elementwise on,
train in the sdpa runs of tests/engine/test_attention_engine.py. The GPU check's rehearsal runs the
ladder end to end. Skipped, with the reason, without the engine."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from engine_runs import SHARED_RUNS, same_losses, train

from zerolab.contracts import SWITCHES
from zerolab.locations import REPO_ROOT

pytestmark = pytest.mark.usefixtures("engine")

EQUAL = [switch.name for switch in SWITCHES if switch.equal]
ALL_OFF = tuple(f"speed.{name}=false" for name in EQUAL)
SDPA_DROPOUT = ("model.attention=sdpa", "model.hidden_dropout=0.1", "model.attention_dropout=0.1")


@pytest.mark.parametrize(("shared", "tolerance"), [("pp2", 1e-5), ("bf16", 0.05)])
def test_the_switches_proven_equal_train_to_the_engines_own_losses(
    trained, dataset, tmp_path, shared, tolerance
):
    on = trained(shared)
    assert all(f"zerolab: switch {name}:" in on.text for name in EQUAL), on.text[:3000]
    recipe, *overrides = SHARED_RUNS[shared]
    off = train(dataset, tmp_path / "off", recipe, *overrides, *ALL_OFF)
    assert "zerolab: switch" not in off.text
    assert same_losses(on, off, tolerance), (on.losses, off.losses)


def test_with_sdpa_attention_and_dropout_the_switches_draw_the_same_dropout(dataset, tmp_path):
    on = train(dataset, tmp_path / "on", "cpu/tiny_z2", *SDPA_DROPOUT)
    off = train(dataset, tmp_path / "off", "cpu/tiny_z2", *SDPA_DROPOUT, *ALL_OFF)
    assert "zerolab: patch sdpa_attention" in on.text
    assert same_losses(on, off, 1e-5), (on.losses, off.losses)


def test_the_gpu_checks_rehearsal_runs_the_ladder_end_to_end(tmp_path):
    """`make gpu-check`'s plan on this CPU with the tiny model: each step timed against its budget,
    the ladder's phases measured in two rounds, the results folder small enough for a lent machine."""
    results = tmp_path / "results"
    work = tmp_path / "work"
    command = [
        sys.executable,
        "-m",
        "zerolab.gpucheck",
        "--rehearse",
        "--only",
        "environment,data,ladder,report",
    ]
    command += ["--work", str(work), "--results", str(results), "--budget", "900"]
    result = subprocess.run(
        command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=900, env=os.environ
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    for step in ("environment", "data", "ladder", "report"):
        state = json.loads((work / "steps" / f"{step}.json").read_text())
        assert state["problem"] is None and state["seconds"] >= 0, (step, state)
    ladder = json.loads((results / "ladder.json").read_text())
    assert ladder["device"] == "cpu" and ladder["plan"]["rounds"] == 2
    rows = {row["phase"]: row for row in ladder["phases"]}
    assert len(rows) == len(ladder["plan"]["phases"]) and all(row["iterations"] == 2 for row in rows.values())
    assert all(row["ms_median"] > 0 for row in rows.values())
    inspected = ladder["inspections"]["engine as it is"]
    assert inspected["profile"]["top_host_ops"] and "needs one" in inspected["syncs"]["note"]
    report = (results / "gpu.md").read_text()
    assert "- ladder: " in report and " of 240 s given" in report and "| engine as it is |" in report
    assert "seeds: not run" in report
    assert len(list(results.iterdir())) <= 8  # a lent machine returns at most eight files
