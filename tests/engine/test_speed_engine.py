"""The speed switches and the ladder on the real engine (tiny GPT-2, CPU). Each switch proven equal
is on by default, so every shared run trains with them; here the same runs train with them off and
must reach the same losses (fp32: 1e-5; bf16: the matrix's bf16 tolerance), across the layouts they
touch: pipeline parallel, bf16, and data parallel under ZeRO-2 with sdpa attention and dropout (the
same dropout draws; the RNG fork host_trims skips only without dropout); the pipeline-parallel and
bf16 runs also without the CPU configs' hardware.host_huge_pages. Tensor parallel (where
async_batch_copy falls back to the engine's broadcast) with them off, and compiled_elementwise on,
train in the sdpa runs of tests/engine/test_attention_engine.py. The switches off by default:
coalesced_grad_reduction trains to the same losses (ZeRO-2) and is refused by DeepSpeed at ZeRO-0;
compiled_layers within a stated tolerance over 20 iterations, against ZeRO-0 (ZeRO's stages train to
the same losses: the engine matrix). The GPU check's rehearsal runs the ladder end to end. Skipped,
with the reason, without the engine."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from engine_runs import SEQ_LENGTH, SHARED_RUNS, same_losses, train

from zerolab.contracts import SWITCHES
from zerolab.locations import REPO_ROOT

pytestmark = pytest.mark.usefixtures("engine")

EQUAL = [switch.name for switch in SWITCHES if switch.equal]
ALL_OFF = tuple(f"speed.{name}=false" for name in EQUAL)
PLAIN_HOST_PAGES = "hardware.host_huge_pages=false"
"""The CPU configs' torch tensors on huge pages, off: nothing computed changes either."""
SDPA_DROPOUT = ("model.attention=sdpa", "model.hidden_dropout=0.1", "model.attention_dropout=0.1")
COALESCED = "coalesced_grad_reduction"
COMPILED_TOLERANCE = 1e-4
"""speed.compiled_layers against the engine's layers, fp32 without dropout (docs/speed.md: measured
equal to the printed 7 digits over 20 iterations)."""


@pytest.mark.parametrize(("shared", "tolerance"), [("pp2", 1e-5), ("bf16", 0.05)])
def test_the_switches_proven_equal_train_to_the_engines_own_losses(
    trained, dataset, tmp_path, shared, tolerance
):
    on = trained(shared)
    assert all(f"zerolab: switch {name}:" in on.text for name in EQUAL), on.text[:3000]
    recipe, *overrides = SHARED_RUNS[shared]
    off = train(dataset, tmp_path / "off", recipe, *overrides, *ALL_OFF, PLAIN_HOST_PAGES)
    assert "zerolab: switch" not in off.text
    assert same_losses(on, off, tolerance), (on.losses, off.losses)


def test_with_sdpa_attention_and_dropout_the_switches_draw_the_same_dropout(dataset, tmp_path):
    """ZeRO-2 with two micro batches a step: the "on" run also reduces the gradients once per step
    (coalesced_grad_reduction), which sums them in another order and so trains to the same losses."""
    on = train(dataset, tmp_path / "on", "cpu/tiny_z2", *SDPA_DROPOUT, f"speed.{COALESCED}=true")
    off = train(dataset, tmp_path / "off", "cpu/tiny_z2", *SDPA_DROPOUT, *ALL_OFF)
    assert "zerolab: patch sdpa_attention" in on.text
    assert f"zerolab: {COALESCED}: gradients reduced once per step" in on.text
    assert on.ds["gradient_accumulation_steps"] == 2
    assert same_losses(on, off, 1e-5), (on.losses, off.losses)


def test_compiled_layers_train_to_the_engines_losses_with_one_graph_for_every_layer(
    dataset, tmp_path, monkeypatch
):
    """speed.compiled_layers over 20 iterations (ZeRO-2, sdpa, fp32, no dropout) against the same
    run without it: within COMPILED_TOLERANCE (docs/speed.md), torch's own log showing no graph
    break and no recompilation (one graph serves both layers). Beside it, the ZeRO-0 seed's
    coalesced_grad_reduction is refused by DeepSpeed and says so."""
    twenty = (
        "model.attention=sdpa",
        f"model.seq_length={SEQ_LENGTH}",
        "train.iters=20",
        "train.log_interval=1",
        "train.lr_warmup_iters=2",
    )
    monkeypatch.setenv("TORCH_LOGS", "graph_breaks,recompiles")
    on = train(dataset, tmp_path / "on", "cpu/tiny_z2", *twenty, "speed.compiled_layers=true", short=False)
    monkeypatch.delenv("TORCH_LOGS")
    off = train(dataset, tmp_path / "off", "cpu/tiny_dp", *twenty, f"speed.{COALESCED}=true", short=False)
    assert "zerolab: compiled_layers: each transformer layer compiled, one graph for all" in on.text
    assert "Graph break" not in on.text and "Recompiling" not in on.text, on.text[-3000:]
    assert len(on.losses) == 20 and same_losses(on, off, COMPILED_TOLERANCE), (on.losses, off.losses)
    assert f"zerolab: {COALESCED}: not used: coalesce_grad_reduction requires ZeRO stage 1/2/3" in off.text


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
    given = json.loads((work / "steps" / "ladder.json").read_text())["budget_s"]
    assert given > 45 and "- ladder: " in report and f" of {given} s given" in report  # the time left
    assert "| engine as it is |" in report and "| every switch |" in report
    assert "seeds: not run" in report
    assert report.index("## zerolab against") < report.index("## The speed ladder")  # headline first
    assert len(list(results.iterdir())) <= 8  # a lent machine returns at most eight files
