"""The pinned engine's own output (Megatron-DeepSpeed 4efb479d, DeepSpeed 0.19, CPU)
parses fully: what our runs will produce."""

from __future__ import annotations

from pathlib import Path

import pytest

from zerolab.logs.parse import parse_log
from zerolab.summarize.discover import Run
from zerolab.summarize.flops import ModelShape, tflops_per_gpu
from zerolab.summarize.summary import Options, summarize_run

SIGKILL_WORDS = (
    "killed by SIGKILL (signal 9): likely out of host memory (the OOM killer) or a scheduler's limit"
)
"""How a death by SIGKILL is said (zerolab.logs.signals.killed_by)."""

CPU = Path(__file__).parents[1] / "fixtures" / "logs" / "cpu-engine"
SETUPS = {"final_z0": "z0", "final_z1": "z1", "final_z2": "z2", "final_z3": "z3", "final_z3off": "z3_offload"}


def _row(name: str) -> dict:
    log = parse_log(CPU / f"{name}.log")
    return summarize_run(Run(log.path), log, None, Options()).row


@pytest.mark.parametrize(("name", "setup"), SETUPS.items())
def test_completed_runs_fill_every_column_but_mfu(name, setup):
    row = _row(name)
    assert row["setup"] == setup
    assert row["status"] == "completed" and row["cause"] is None
    expected = {
        "world_size": 2,
        "micro_batch_size": 2,
        "global_batch_size": 8,
        "precision": "fp32",
        "num_layers": 2,
        "hidden_size": 64,
        "seq_length": 128,
        "padded_vocab_size": 50304,
        "iterations_done": 20,
        "train_iters": 20,
        "warmup_until_iteration": 5,
        "steady_intervals": 3,
        "tokens_per_s_per_gpu_source": "log (tgs)",
    }
    assert {key: row[key] for key in expected} == expected
    for key in (
        "tokens_per_s_per_gpu",
        "ms_per_iter",
        "tflops_per_gpu",
        "epoch_time_s",
        "max_allocated_GiB",
        "peak_host_GiB",
        "first_loss",
        "last_loss",
        "val_loss",
        "val_ppl",
    ):
        assert row[key] is not None and row[key] > 0, key
    assert row["tokens_per_s_per_gpu_p10"] <= row["tokens_per_s_per_gpu"] <= row["tokens_per_s_per_gpu_p90"]
    assert row["mfu_pct"] is None and row["peak_tflops"] is None  # no GPU: no peak, no MFU
    assert row["last_loss"] < row["first_loss"]


def test_steady_state_median_of_the_logged_tgs_after_warmup():
    # final_z1 logs tgs 1324.869 (iteration 5, warm-up), 1468.485, 1166.159, 1476.722
    row = _row("final_z1")
    assert row["tokens_per_s_per_gpu"] == 1468.485
    assert row["ms_per_iter"] == 348.7
    assert row["first_loss"] == 10.81617 and row["last_loss"] == 10.69569
    assert (row["val_iteration"], row["val_loss"], row["val_ppl"]) == (20, 10.68056, 43501.91)


def test_deepspeed_throughput_memory_and_offload_from_the_config_dump():
    log = parse_log(CPU / "final_z3off.log")
    assert log.ds_max_allocated_GB == 0.63
    row = summarize_run(Run(log.path), log, None, Options()).row
    assert row["offload"] is True and row["zero_stage"] == 3
    assert _row("final_z3")["offload"] is False


def test_formula_tflops_agree_with_the_logged_two_decimal_values():
    log = parse_log(CPU / "final_z1.log")
    shape = ModelShape(
        num_layers=2, hidden_size=64, seq_length=128, padded_vocab_size=50304, ffn_hidden_size=256
    )
    for ms, logged in zip(log.iterations["ms_per_iter"], log.iterations["tflops_per_gpu"], strict=True):
        assert round(tflops_per_gpu(shape, 8, ms, 2), 2) == logged


def test_bf16_precision_and_the_epoch_from_the_dataset_lines():
    row = _row("bf16_z2")
    assert row["precision"] == "bf16"
    assert row["epoch_tokens"] == 394 * 128
    assert row["epoch_time_s"] == pytest.approx(394 * 128 / (row["tokens_per_s_per_gpu"] * 2), rel=1e-3)


@pytest.mark.parametrize(
    ("name", "cause"),
    [
        ("fp16_z2", "exception: ValueError: Type fp16 is not supported on your device."),
        (
            "z2_pipe",
            "exception: AssertionError: ZeRO-2 and ZeRO-3 are incompatible with pipeline parallelism",
        ),
        ("try5", "exception: AssertionError: Mismatch in local rank setting"),
    ],
)
def test_failed_launches_name_the_exception(name, cause):
    row = _row(name)
    assert row["status"] == "failed" and row["cause_kind"] == "exception"
    assert row["cause"].startswith(cause)
    assert row["iterations_done"] is None and row["tokens_per_s_per_gpu"] is None


def test_deepspeed_launcher_log():
    row = _row("dslauncher_z2")
    assert row["status"] == "completed" and row["setup"] == "z2" and row["iterations_done"] == 20


@pytest.mark.parametrize(
    ("name", "cause"),
    [
        (
            "signal_sigkill_rank1",
            f"rank 1 {SIGKILL_WORDS}",
        ),
        ("dslauncher_sigsegv_rank1", "a rank killed by SIGSEGV (signal 11)"),
    ],
)
def test_a_rank_killed_by_a_signal_is_the_cause(name, cause):
    row = _row(name)
    assert (row["status"], row["cause_kind"], row["cause"]) == ("failed", "signal", cause)
    assert row["iterations_done"] == 3
