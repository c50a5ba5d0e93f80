"""Every real log in tests/fixtures/logs/real gives the values its SOURCES.md states."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from zerolab.logs.parse import ParsedLog, parse_log
from zerolab.summarize.discover import Run
from zerolab.summarize.summary import Options, summarize_run

REAL = Path(__file__).parents[1] / "fixtures" / "logs" / "real"
ABSENT = "absent"

# log -> {iteration: {column: expected}}; ABSENT: the line did not print it (NaN column)
ITERATIONS: dict[str, dict[int, dict[str, object]]] = {
    "megatronlm_2021-pp16-all-skipped-truncated": {
        1: {
            "ms_per_iter": 155483.8,
            "global_batch_size": 1024,
            "skipped_iterations": 1,
            "nan_iterations": 0,
            "loss": ABSENT,
        },
        3: {"ms_per_iter": 128891.5},
    },
    "megatronlm_2021-tp4pp4-concat-mem-cancelled": {
        10: {"loss": ABSENT, "skipped_iterations": 10, "ms_per_iter": 2152.2},
        200: {"ms_per_iter": 1382.2, "loss": 7.365868, "grad_norm": 3.952, "global_batch_size": 4},
    },
    "megatronlm_2022-bert-sop-loss": {
        10: {
            "ms_per_iter": 356.2,
            "global_batch_size": 4,
            "skipped_iterations": 10,
            "nan_iterations": 0,
            "loss": ABSENT,
        }
    },
    "megatronlm_core-2024-mixtral-moe": {
        29: {
            "ms_per_iter": 5912.1,
            "tflops_per_gpu": 220.9,
            "global_batch_size": 128,
            "loss": 1.867856,
            "grad_norm": 1.769,
        }
    },
    "megatronlm_bridge-2026-mtp-loss": {
        30: {"ms_per_iter": 29511.9, "global_batch_size": 512, "loss": 0.8535482, "grad_norm": 1.366}
    },
    "megatronlm_epfl-fork-bad-grad-norm": {
        3633: {"ms_per_iter": 6956.6, "global_batch_size": 64, "grad_norm": 0.794, "loss": ABSENT}
    },
    "megatronds_v115-zero3-timeout-ansi": {
        1: {"ms_per_iter": 123742.4, "loss": 12.52221, "tflops_per_gpu": 41.31}
    },
    "megatronds_2021-meg24-3d-pp16-full-run": {
        3: {"ms_per_iter": 137138.4, "global_batch_size": 1024, "loss": 41.03157, "skipped_iterations": 0},
        49: {"loss": 7.747273, "ms_per_iter": 136328.8},
    },
    "megatronds_gpt3-175b-tgs-validation": {
        5: {
            "ms_per_iter": 344656.1,
            "loss": 11.00078,
            "samples_per_s": 4.457,
            "tokens_per_s_per_gpu": 142.612,
            "tflops_per_gpu": 153.38,
            "seq_length": 2048,
        },
        2400: {"loss": 9.002386, "tokens_per_s_per_gpu": 155.603, "tflops_per_gpu": 167.35},
    },
    "megatronds_alcf-sunspot-tgs-nospace-esc": {
        1: {
            "ms_per_iter": 25849.1,
            "loss": 11.17136,
            "samples_per_s": 3.714,
            "tokens_per_s_per_gpu": 633.832,
            "tflops_per_gpu": 38.61,
        }
    },
    "megatronds_alcf-polaris-tgs-nospace-multirank-mem": {
        2: {
            "ms_per_iter": 10154.3,
            "loss": 17.66422,
            "samples_per_s": 3.151,
            "tokens_per_s_per_gpu": 1613.503,
            "tflops_per_gpu": 98.29,
        }
    },
    "megatronds_alcf-throughput-ckpt-crash": {
        200: {
            "ms_per_iter": 14541.4,
            "global_batch_size": 768,
            "loss": 5.897035,
            "tokens_per_s_per_gpu": 1126.713,
            "tflops_per_gpu": 68.63,
        }
    },
    "megatronds_alcf-kv-format-polaris": {
        2: {
            "ms_per_iter": 16030.6,
            "global_batch_size": 256,
            "loss": 11.208171,
            "samples_per_s": 15.969,
            "tokens_per_s_per_gpu": 8176.383,
            "tflops_per_gpu": 160.07,
        }
    },
    "megatronds_alcf-kv-format-sunspot-loss-absent": {
        1: {
            "ms_per_iter": 101182.7,
            "loss": 11.198063,
            "tokens_per_s_per_gpu": 1943.099,
            "tflops_per_gpu": 45.34,
        },
        2: {
            "ms_per_iter": 67212.1,
            "loss": ABSENT,
            "tokens_per_s_per_gpu": 2925.188,
            "tflops_per_gpu": 68.26,
            "nan_iterations": 0,
        },
    },
    "megatronds_perlmutter-srun-label-oom-kill": {
        1: {
            "ms_per_iter": 31591.7,
            "global_batch_size": 32,
            "loss": 15.75255,
            "samples_per_s": 1.013,
            "tflops_per_gpu": 37.10,
        }
    },
    "megatronds_grad-norm-nan-loss-absent": {
        5427: {
            "ms_per_iter": 4225.8,
            "global_batch_size": 8,
            "loss": ABSENT,
            "grad_norm": math.nan,
            "samples_per_s": 1.893,
            "tflops_per_gpu": 78.77,
        }
    },
    "bigscience_tr11-176b-loss-spike": {
        31218: {
            "ms_per_iter": 107530.0,
            "global_batch_size": 2048,
            "loss": 2.345279,
            "grad_norm": 145.119,
            "samples_per_s": 19.046,
            "tflops_per_gpu": 145.82,
        }
    },
    "bigscience_tr11-176b-wrapped-lines": {
        42780: {
            "ms_per_iter": 105160.0,
            "loss": 2.117073,
            "grad_norm": 0.150,
            "samples_per_s": 19.474,
            "tflops_per_gpu": 149.10,
            "nan_iterations": 0,
        },
        42784: {"ms_per_iter": 111140.0, "tflops_per_gpu": 141.09},
    },
    "bigscience_tr11-176b-gpu-crash-eval-hang": {
        45000: {
            "ms_per_iter": 111000.0,
            "loss": 2.113567,
            "grad_norm": 0.139,
            "samples_per_s": 18.451,
            "tflops_per_gpu": 141.26,
        }
    },
    "bigscience_tr1-13b-loss-spike": {
        29050: {"ms_per_iter": 22148.5, "global_batch_size": 1024, "loss": 7.343709, "grad_norm": 0.0}
    },
    "bigscience_tr1-13b-ecc-crash": {
        43680: {"ms_per_iter": 25593.4, "loss": 2.635663, "grad_norm": 17224.723}
    },
    "bigscience_tr8-104b-diverged-loss-missing": {
        9026: {"ms_per_iter": 62075.5, "loss": 7.024580, "grad_norm": 20609.780},
        9027: {"ms_per_iter": 63274.6, "loss": ABSENT, "grad_norm": 20609.780, "nan_iterations": 0},
    },
}

FAILURES = {
    "megatronlm_core-moe-nccl-timeout": ("nccl_timeout", "Timeout(ms)=600000"),
    "megatronlm_pai-patch-nan-assert": ("nan_or_overflow", "found NaN in local grad norm"),
    "megatronds_v115-zero3-timeout-ansi": ("killed", "DUE TO TIME LIMIT"),
    "megatronds_alcf-throughput-ckpt-crash": ("exception", "AttributeError"),
    "megatronds_perlmutter-srun-label-oom-kill": ("out_of_memory", "oom_kill"),
    "megatronlm_2021-tp4pp4-concat-mem-cancelled": ("killed", "CANCELLED"),
    "bigscience_tr11-176b-gpu-crash-eval-hang": ("gpu_error", "CUDA error: unknown error"),
    "bigscience_tr1-13b-ecc-crash": ("gpu_error", "ECC"),
    "bigscience_oom-nccl-abort": ("out_of_memory", "Tried to allocate 37631.79 GiB"),
    "deepspeed_zero-init-oom-interleaved": ("out_of_memory", "Tried to allocate 8.01 GiB"),
}
NOT_FAILED = {
    "megatronlm_2021-pp16-all-skipped-truncated": "running_or_cut_off",
    "megatronds_2021-meg24-3d-pp16-full-run": "running_or_cut_off",
    "deepspeed_chat-k8s-pod-prefix": "completed",
    "deepspeed_hf-trainer-gpt2-zero3-cr-multirank": "completed",
}


def _parsed(name: str) -> ParsedLog:
    return parse_log(REAL / f"{name}.log")


def _record(log: ParsedLog, iteration: int) -> dict[str, float]:
    index = list(log.iterations["iteration"]).index(float(iteration))
    return {column: values[index] for column, values in log.iterations.items()}


def test_every_real_log_is_covered_and_understood():
    names = {p.stem for p in REAL.glob("*.log")}
    assert len(names) == 33
    for name in sorted(names):
        assert _parsed(name).understood() is None, name


@pytest.mark.parametrize(
    ("name", "iteration", "column", "expected"),
    [
        (name, iteration, column, expected)
        for name, records in ITERATIONS.items()
        for iteration, columns in records.items()
        for column, expected in columns.items()
    ],
)
def test_iteration_values(name, iteration, column, expected):
    value = _record(_parsed(name), iteration)[column]
    if expected == ABSENT or (isinstance(expected, float) and math.isnan(expected)):
        assert math.isnan(value)
    else:
        assert value == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize(("name", "kind", "text"), [(n, k, t) for n, (k, t) in FAILURES.items()])
def test_failure_cause(name, kind, text):
    log = _parsed(name)
    summary = summarize_run(Run(log.path), log, None, Options())
    assert summary.row["status"] == "failed"
    assert summary.row["cause_kind"] == kind
    assert text in summary.row["cause"]


@pytest.mark.parametrize(("name", "status"), NOT_FAILED.items())
def test_runs_that_did_not_fail(name, status):
    log = _parsed(name)
    assert summarize_run(Run(log.path), log, None, Options()).row["status"] == status


def test_memory_reports_from_concatenated_lines_are_all_read():
    log = _parsed("megatronlm_2021-tp4pp4-concat-mem-cancelled")
    assert len(log.max_allocated_MB_by_rank) == 16
    assert log.max_allocated_MB_by_rank[0] == pytest.approx(26204.5595703125)


def test_memory_report_of_every_rank_and_the_oldest_form():
    assert _parsed("megatronds_2021-meg24-3d-pp16-full-run").max_allocated_MB_by_rank[0] == 19961.072265625
    assert len(_parsed("megatronds_2021-meg24-3d-pp16-full-run").max_allocated_MB_by_rank) == 64
    assert _parsed("megatronds_v115-zero3-timeout-ansi").max_allocated_MB_by_rank == {None: 26118.2294921875}
    assert _parsed("megatronds_perlmutter-srun-label-oom-kill").max_allocated_MB_by_rank[2] == 23105.095703125


@pytest.mark.parametrize(
    ("name", "iteration", "loss", "ppl"),
    [
        ("megatronlm_2021-tp4pp4-concat-mem-cancelled", 200, 7.487306, 1785.236),
        ("megatronds_gpt3-175b-tgs-validation", 2400, 9.009587, 8181.144),
        ("bigscience_tr11-176b-gpu-crash-eval-hang", 45000, 2.327091, 10.24808),
    ],
)
def test_validation(name, iteration, loss, ppl):
    log = _parsed(name)
    row = summarize_run(Run(log.path), log, None, Options()).row
    assert (row["val_iteration"], row["val_loss"], row["val_ppl"]) == (iteration, loss, ppl)


@pytest.mark.parametrize(
    ("name", "max_allocated_GB", "last_samples_per_s"),
    [
        ("megatronds_alcf-throughput-ckpt-crash", 19.52, 58.75503515561452),
        ("megatronds_alcf-kv-format-polaris", 15.59, None),
        ("deepspeed_hf-trainer-zero2-throughput", 6.12, None),  # `MemA   llocated=` broken by spaces
        ("deepspeed_chat-k8s-pod-prefix", 10.55, 6.819754921642627),
        ("deepspeed_v06-fp16-overflow-timer-memalloc", 2.92, 1418.7156532263152),
        ("deepspeed_v03-zero3-overflow-old-timer", None, None),
    ],
)
def test_deepspeed_throughput_timer(name, max_allocated_GB, last_samples_per_s):
    log = _parsed(name)
    assert log.ds_max_allocated_GB == max_allocated_GB
    assert len(log.ds_throughput["step"]) > 0
    if last_samples_per_s is not None:
        assert log.ds_throughput["samples_per_s"][-1] == last_samples_per_s


def test_deepspeed_timer_generations_and_broken_key():
    log = _parsed("deepspeed_hf-trainer-zero2-throughput")
    steps = list(log.ds_throughput["step"])
    assert 20.0 in steps
    assert log.ds_throughput["samples_per_s"][steps.index(20.0)] == 111.13499047776766
    old = _parsed("deepspeed_v03-zero3-overflow-old-timer")
    assert log.ds_throughput["step"] and old.ds_throughput["samples_per_s"][0] == 1.8825260836384787


@pytest.mark.parametrize(
    ("name", "max_allocated_GB", "host_GB"),
    [
        ("megatronds_v115-zero3-timeout-ansi", 19.67, 44.57),
        ("deepspeed_hf-trainer-gpt2-zero3-cr-multirank", 6.63, 146.29),
        ("megatronds_2021-meg24-3d-pp16-full-run", 1.73, 39.14),
    ],
)
def test_see_memory_usage(name, max_allocated_GB, host_GB):
    log = _parsed(name)
    assert (log.see_max_allocated_GB, log.host_used_GB) == (max_allocated_GB, host_GB)


def test_argument_and_deepspeed_config_dumps_fill_the_config_columns():
    log = _parsed("megatronds_2021-meg24-3d-pp16-full-run")
    row = summarize_run(Run(log.path), log, None, Options()).row
    expected = {
        "world_size": 64,
        "zero_stage": 0,
        "micro_batch_size": 4,
        "global_batch_size": 1024,
        "tensor_parallel": 4,
        "pipeline_parallel": 16,
        "num_layers": 64,
        "hidden_size": 8192,
        "seq_length": 1024,
        "precision": "fp16",
        "setup": "tp4_pp16_z0",
    }
    assert {key: row[key] for key in expected} == expected
    assert log.config.ds_json["train_micro_batch_size_per_gpu"] == 4
    assert log.config.ds_json["gradient_accumulation_steps"] == 256
    assert log.train_iters == 1000


def test_megatron_lm_argument_dump_without_deepspeed():
    log = _parsed("megatronlm_2021-pp16-all-skipped-truncated")
    row = summarize_run(Run(log.path), log, None, Options()).row
    assert (row["world_size"], row["micro_batch_size"], row["global_batch_size"]) == (64, 4, 1024)
    assert (row["tensor_parallel"], row["pipeline_parallel"], row["seq_length"]) == (4, 16, 1024)
    assert row["zero_stage"] is None and row["setup"] is None
    assert "3 iterations skipped (fp16 overflow)" in row["anomalies"]


def test_hf_trainer_zero2_config_and_loss():
    log = _parsed("deepspeed_hf-trainer-zero2-throughput")
    row = summarize_run(Run(log.path), log, None, Options()).row
    assert (row["zero_stage"], row["micro_batch_size"], row["global_batch_size"]) == (2, 16, 16)
    assert list(log.hf_losses[:2]) == [2.075, 0.8091]  # 0.8091 at epoch 0.08


def test_deepspeed_skipped_steps_and_overflows_are_anomalies():
    for name, text in (
        ("deepspeed_hf-trainer-t5-all-steps-skipped", "1999 optimizer steps skipped"),
        ("deepspeed_v03-zero3-overflow-old-timer", "5 fp16 overflow messages"),
        ("deepspeed_hf-trainer-overflow-to-min-scale", "5 fp16 overflow messages"),
        ("megatronds_grad-norm-nan-loss-absent", "grad norm NaN in 3 iteration lines"),
        ("megatronlm_epfl-fork-bad-grad-norm", "1 bad grad norm warnings"),
    ):
        log = _parsed(name)
        assert text in " ".join(summarize_run(Run(log.path), log, None, Options()).row["anomalies"]), name


def test_rank_prefixed_iteration_lines_come_from_the_rank_that_prints_them():
    assert _parsed("bigscience_tr11-176b-loss-spike").reporter == "default7"
    assert _parsed("megatronds_perlmutter-srun-label-oom-kill").reporter == "3"


def test_deepspeed_chat_perplexity_and_progress():
    log = _parsed("deepspeed_chat-k8s-pod-prefix")
    assert log.validations[-1].ppl == 2.159278392791748
    assert log.ds_skipped_steps == 19


def test_megatron_lms_2019_validation_lines_are_read(tmp_path: Path):
    # pretrain_gpt2.py of 2019 (FORMATS.md 1a): `LM loss:` and `LM PPL:`, no `value`
    path = tmp_path / "train.log"
    path.write_text(
        " iteration     1000/    2000 | elapsed time per iteration (ms): 312.5 | learning rate 1.500E-04 |"
        " lm loss 4.612345E+00 |\n"
        "----------------------------------------------------------------------------------------------\n"
        " validation loss at iteration 1000 | LM loss: 4.503653E+00 | LM PPL: 9.034E+01\n"
    )
    [validation] = parse_log(path).validations
    assert (validation.iteration, validation.loss, validation.ppl) == (1000, 4.503653, 90.34)
