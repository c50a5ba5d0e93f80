"""One summary row per run: config, status, steady-state throughput, TFLOPs, MFU,
memory and loss. A value the run does not state is None (empty), never 0."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from zerolab.estimate.runs import estimated_peak_gib
from zerolab.logs.failures import cause_text
from zerolab.logs.parse import ParsedLog
from zerolab.rundir import COMPLETED, EVAL_METRICS, FAILED, KILLED, REFUSED, SAME_WEIGHTS
from zerolab.summarize.columns import ROW_KEYS, RUNNING_OR_CUT_OFF, TRUNCATED
from zerolab.summarize.config import config_columns, setup_label
from zerolab.summarize.discover import Run
from zerolab.summarize.finetuning import records_as_iterations, task_columns
from zerolab.summarize.flops import ModelShape, tflops_per_gpu
from zerolab.summarize.rundir import RunDirFacts
from zerolab.summarize.stats import Warmup, spread


@dataclass(frozen=True)
class Options:
    """User choices that change the numbers."""

    warmup: Warmup = field(default_factory=Warmup)
    peak_tflops: float | None = None
    epoch_tokens: int | None = None


@dataclass
class RunSummary:
    """A row (JSON-ready dict) and the per-interval series the plots draw."""

    row: dict[str, Any]
    loss_curve: tuple[list[float], list[float]] = ([], [])
    tokens_per_s_per_gpu: list[float] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    """Values left out, each naming its file and line or key (`path:line: what`)."""
    run_name: str = ""
    """The run's own name; row["name"] adds the directory when two runs share it."""


def _finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def _rounded(value: float | None, digits: int = 10) -> float | None:
    value = _finite(value)
    return None if value is None else float(f"{value:.{digits}g}")


def _status(log: ParsedLog, facts: RunDirFacts | None) -> dict[str, Any]:
    """The run's status and cause. status.json's own account wins where it has one: a run it says was
    stopped (`killed`: Ctrl-C, SIGTERM, a cancelled job) is killed by what it names, whatever the
    launcher printed as it stopped (torchrun's `SignalException`); a log without status.json (not
    launched by zerolab) is read from its lines."""
    failure = log.ending.failure
    state = (facts.status.get("state") if facts else None) or None
    if facts and state == REFUSED:  # a sweep's cell the checks refused: nothing ran
        return {"status": REFUSED, "cause_kind": None, "cause": facts.status.get("cause")}
    if facts and state == KILLED:
        cause = facts.status.get("cause")
        if not cause and facts.status.get("exit_code") is not None:
            cause = f"exit code {facts.status['exit_code']}"
        return {"status": KILLED, "cause_kind": "killed", "cause": cause}
    completed_by_count = bool(
        log.iteration_count and log.train_iters and log.iterations["iteration"][-1] >= log.train_iters
    )
    if state == FAILED or (state is None and failure):
        kind = failure.kind if failure else "exception"
        detail = failure.detail if failure else (facts.status.get("cause") if facts else None)
        if not detail and facts and facts.status.get("exit_code") is not None:
            detail = f"exit code {facts.status['exit_code']}"
        return {
            "status": FAILED,
            "cause_kind": kind,
            "cause": cause_text(kind, detail),
        }
    if state == COMPLETED and not (log.ending.completed or completed_by_count):
        return {"status": TRUNCATED, "cause_kind": None, "cause": _ends_early(log)}
    if state == COMPLETED or (state is None and (log.ending.completed or completed_by_count)):
        return {"status": COMPLETED, "cause_kind": None, "cause": None}
    return {"status": RUNNING_OR_CUT_OFF, "cause_kind": None, "cause": None}


BEFORE_STOPPED = ("out_of_memory", "nan_or_overflow", "nccl_timeout", "gpu_error")
"""Failure kinds a log of a run that was then stopped is worth a note for: a trouble of its own
before the stop (what the launcher printed as it stopped is not)."""


def _before_stopped(log: ParsedLog, status: dict[str, Any]) -> list[str]:
    """A note for a killed run whose log shows a failure of its own before it was stopped."""
    failure = log.ending.failure
    if status["status"] != KILLED or failure is None or failure.kind not in BEFORE_STOPPED:
        return []
    return [f"{log.path.name}:{failure.line}: before it was stopped: {failure.label}"]


def _ends_early(log: ParsedLog) -> str:
    """Why a run that status.json calls completed is not, by its log."""
    name = log.path.name
    if not log.iteration_count:
        return f"status.json says completed, but {name} holds no iteration line"
    last = int(log.iterations["iteration"][-1])
    of = f" of {log.train_iters}" if log.train_iters else ""
    return f"status.json says completed, but {name} ends at iteration {last}{of}"


def _anomalies(log: ParsedLog) -> list[str]:
    columns = log.iterations
    notes = []
    skipped = sum(v for v in columns["skipped_iterations"] if math.isfinite(v))
    if skipped:
        notes.append(f"{int(skipped)} iterations skipped (fp16 overflow)")
    elif log.ds_skipped_steps:
        notes.append(f"{log.ds_skipped_steps} optimizer steps skipped (fp16 overflow)")
    elif log.overflow_messages:
        notes.append(f"{log.overflow_messages} fp16 overflow messages")
    nan_iterations = sum(v for v in columns["nan_iterations"] if math.isfinite(v))
    if nan_iterations:
        notes.append(f"{int(nan_iterations)} NaN iterations")
    if log.nan_grad_norms:
        notes.append(f"grad norm NaN in {log.nan_grad_norms} iteration lines")
    if log.losses_absent:
        notes.append(
            f"loss not printed in {log.losses_absent} of {log.iteration_count} iteration lines "
            "(NaN/inf loss, or every iteration of the interval skipped)"
        )
    if log.ending.nan_warnings:
        notes.append(f"{log.ending.nan_warnings} bad grad norm warnings")
    return notes


def _tokens_per_s_per_gpu(log: ParsedLog, i: int, cfg: dict[str, Any]) -> tuple[float, str] | None:
    col = log.iterations
    tgs = col["tokens_per_s_per_gpu"][i]
    if math.isfinite(tgs):
        return tgs, "log (tgs)"
    seq = _finite(col["seq_length"][i]) or cfg["seq_length"]
    world = cfg["world_size"]
    if not seq or not world:
        return None
    samples = col["samples_per_s"][i]
    if math.isfinite(samples):
        return samples * seq / world, "samples per second x seq_length / world_size"
    batch, ms = _finite(col["global_batch_size"][i]) or cfg["global_batch_size"], col["ms_per_iter"][i]
    if batch and math.isfinite(ms) and ms > 0:
        return batch * seq / (ms / 1000.0) / world, "global batch x seq_length / iteration time / world_size"
    return None


def _tflops(log: ParsedLog, i: int, cfg: dict[str, Any]) -> tuple[float, str] | None:
    col = log.iterations
    shape_known = all(
        cfg[k] for k in ("num_layers", "hidden_size", "seq_length", "padded_vocab_size", "world_size")
    )
    batch, ms = _finite(col["global_batch_size"][i]) or cfg["global_batch_size"], col["ms_per_iter"][i]
    if shape_known and batch and math.isfinite(ms) and ms > 0:
        shape = ModelShape(
            cfg["num_layers"],
            cfg["hidden_size"],
            cfg["seq_length"],
            cfg["padded_vocab_size"],
            cfg["ffn_hidden_size"],
            cfg["recompute"],
        )
        return tflops_per_gpu(
            shape, batch, ms, cfg["world_size"]
        ), "formula (Megatron-DeepSpeed throughput_calculator)"
    value = col["tflops_per_gpu"][i]
    return (value, "log") if math.isfinite(value) else None


def _spread_columns(prefix: str, values: list[float], digits: int = 10) -> dict[str, Any]:
    result = spread(values)
    return {
        prefix: _rounded(result.median, digits) if result else None,
        f"{prefix}_p10": _rounded(result.p10, digits) if result else None,
        f"{prefix}_p90": _rounded(result.p90, digits) if result else None,
    }


def _memory(log: ParsedLog, facts: RunDirFacts | None) -> dict[str, Any]:
    """Peak GPU and host memory with their sources; none for a run that never reached its first
    step (what it measured while starting is no run's figure)."""
    if not log.trained:
        return dict.fromkeys(
            ("max_allocated_GiB", "max_allocated_source", "peak_host_GiB", "peak_host_source")
        )
    candidates = []
    if log.max_allocated_MB_by_rank:
        candidates.append(
            (max(log.max_allocated_MB_by_rank.values()) / 1024, "Megatron memory report (max over ranks)")
        )
    if log.ds_max_allocated_GB is not None:
        candidates.append((log.ds_max_allocated_GB, "DeepSpeed throughput line (MaxMemAllocated)"))
    if log.see_max_allocated_GB is not None:
        candidates.append((log.see_max_allocated_GB, "DeepSpeed see_memory_usage (Max_MA)"))
    gpu, gpu_source = max(candidates) if candidates else (None, None)
    if facts and facts.peak_host_rss_MiB is not None:
        host, host_source = facts.peak_host_rss_MiB / 1024, "samples.csv (process tree RSS)"
    elif log.host_used_GB is not None:
        host, host_source = log.host_used_GB, "log: see_memory_usage CPU used (whole machine)"
    else:
        host, host_source = None, None
    return {
        "max_allocated_GiB": _rounded(gpu, 6),
        "max_allocated_source": gpu_source,
        "peak_host_GiB": _rounded(host, 6),
        "peak_host_source": host_source,
    }


def estimate_columns(
    run: Run, log: ParsedLog, measured_gib: float | None
) -> tuple[dict[str, Any], list[str]]:
    """`estimated_peak_GiB` (zerolab estimate's predicted peak allocated for the run's setup) and
    `estimate_error_pct` ((estimate - measured) / measured), and a note when a run with measured
    memory has no estimate."""
    predicted, reason = estimated_peak_gib(run.run_dir, log)
    error = (
        100.0 * (predicted - measured_gib) / measured_gib if predicted is not None and measured_gib else None
    )
    columns = {"estimated_peak_GiB": _rounded(predicted, 6), "estimate_error_pct": _rounded(error, 3)}
    notes = [f"no memory estimate: {reason}"] if reason and measured_gib is not None else []
    return columns, notes


def _losses(log: ParsedLog) -> dict[str, Any]:
    losses = [v for v in log.iterations["loss"] if math.isfinite(v)] or [
        v for v in log.hf_losses if math.isfinite(v)
    ]
    plain = [v for v in log.validations if v.label in ("validation", "valid")] or log.validations
    last_val = plain[-1] if plain else None
    return {
        "first_loss": losses[0] if losses else None,
        "last_loss": losses[-1] if losses else None,
        "val_loss": _finite(last_val.loss) if last_val else None,
        "val_ppl": _finite(last_val.ppl) if last_val else None,
        "val_iteration": last_val.iteration if last_val and last_val.iteration >= 0 else None,
    }


def _evaluation(scores: dict[str, Any]) -> dict[str, Any]:
    """The summary's columns of eval.json: each task's metrics and where its examples came from, and
    what scored HellaSwag."""
    row: dict[str, Any] = {"eval_iteration": None}
    for task, metrics in EVAL_METRICS.items():
        score = scores.get(task)
        for metric in metrics:
            row[f"eval_{task}_{metric}"] = _finite(score["metrics"].get(metric)) if score else None
        row[f"eval_{task}_data"] = score["data"] if score else None
        if score and score.get("iteration") is not None:
            row["eval_iteration"] = score["iteration"]
    row["eval_hellaswag_scorer"] = scores["hellaswag"].get("scorer") if scores.get("hellaswag") else None
    return row


SCORED_AS = "eval scores: those of "
"""How a run's note begins where its eval.json holds another run's scores (summary.md gathers them)."""


def _scored_as(scores: dict[str, Any]) -> list[str]:
    """A note where eval.json's scores are another run's: its checkpoint holds the same weights."""
    for score in scores.values():
        if score.get("same_weights_as"):
            difference = score.get("weights_difference") or 0.0
            return [
                f"{SCORED_AS}{score['same_weights_as']}, whose checkpoint holds the same weights "
                f"within {SAME_WEIGHTS:g} (largest difference {difference:.1g}): scored once"
            ]
    return []


def _run_name(run: Run, facts: RunDirFacts | None) -> str:
    if run.run_dir is not None:
        name = facts.run.get("name") if facts else None
        return str(name) if name else run.run_dir.name
    assert run.log is not None
    return run.log.stem


def summarize_run(run: Run, log: ParsedLog, facts: RunDirFacts | None, options: Options) -> RunSummary:
    """The summary row of one run (and the series its plots need)."""
    cfg = config_columns(facts.run if facts else {}, log)
    if facts and facts.finetune and not log.iteration_count:
        records_as_iterations(log, facts.finetune, cfg["world_size"])
    iterations = list(log.iterations["iteration"])
    notes: list[str] = []
    use_ds_timer = not iterations and len(log.ds_throughput["step"]) > 0
    steps = list(log.ds_throughput["step"]) if use_ds_timer else iterations
    cutoff = options.warmup.cutoff(steps)
    steady = [i for i, step in enumerate(steps) if step > cutoff]
    if steps and not steady:
        steady = list(range(len(steps)))
        notes.append("no logged interval after the warm-up: every interval used")
    tokens, tflops, ms, samples = [], [], [], []
    tokens_source = tflops_source = None
    for i in steady:
        if use_ds_timer:
            rate = log.ds_throughput["samples_per_s"][i]
            samples.append(rate)
            if cfg["seq_length"] and cfg["world_size"] and math.isfinite(rate):
                tokens.append(rate * cfg["seq_length"] / cfg["world_size"])
                tokens_source = "DeepSpeed CurrSamplesPerSec x seq_length / world_size"
            if cfg["global_batch_size"] and math.isfinite(rate) and rate > 0:
                ms.append(cfg["global_batch_size"] / rate * 1000.0)
            continue
        ms.append(log.iterations["ms_per_iter"][i])
        samples.append(log.iterations["samples_per_s"][i])
        found = _tokens_per_s_per_gpu(log, i, cfg)
        if found:
            tokens.append(found[0])
            tokens_source = tokens_source or found[1]
        found = _tflops(log, i, cfg)
        if found:
            tflops.append(found[0])
            tflops_source = tflops_source or found[1]
    row: dict[str, Any] = {"name": _run_name(run, facts), "setup": setup_label(cfg), "path": str(run.path)}
    row["sweep"] = None  # a sweep's cell: zerolab.summarize.sweeps
    row.update({k: v for k, v in cfg.items() if k not in ("recompute", "epoch_tokens")})
    status = _status(log, facts)
    row.update(status)
    notes += _before_stopped(log, status)
    row["anomalies"] = _anomalies(log)
    row["iterations_done"] = int(steps[-1]) if steps else None
    row["train_iters"] = log.train_iters or (facts.run.get("train_iters") if facts else None)
    row["warmup_until_iteration"] = int(cutoff) if steps else None
    row["steady_intervals"] = len(steady)
    row.update(_spread_columns("tokens_per_s_per_gpu", tokens))
    row["tokens_per_s_per_gpu_source"] = tokens_source
    samples_spread = spread(samples)
    row["samples_per_s"] = _rounded(samples_spread.median) if samples_spread else None
    row.update(_spread_columns("ms_per_iter", ms))
    row.update(_spread_columns("tflops_per_gpu", tflops))
    row["tflops_per_gpu_source"] = tflops_source
    epoch_tokens, epoch_source = _epoch_tokens(cfg, log, options)
    row["epoch_tokens"] = epoch_tokens
    row["epoch_tokens_source"] = epoch_source
    world = cfg["world_size"]
    rate = row["tokens_per_s_per_gpu"]
    row["epoch_time_s"] = (
        _rounded(epoch_tokens / (rate * world), 6) if epoch_tokens and rate and world else None
    )
    peak, peak_source = options.peak_tflops, "--peak-tflops"
    if peak is None and facts and facts.device_peak_tflops:
        peak, peak_source = facts.device_peak_tflops, f"doctor.json: {facts.device_name}"
    row["peak_tflops"] = peak
    row["peak_tflops_source"] = peak_source if peak else None
    row["mfu_pct"] = (
        _rounded(100.0 * row["tflops_per_gpu"] / peak, 3) if peak and row["tflops_per_gpu"] else None
    )
    row.update(_memory(log, facts))
    estimate, estimate_notes = estimate_columns(run, log, row["max_allocated_GiB"])
    row.update(estimate)
    row.update(_losses(log))
    row.update(_evaluation(facts.evaluation if facts else {}))
    row.update(task_columns(facts.run.get("task") if facts else None, facts.finetune if facts else []))
    problems = facts.problems if facts else []
    if log.ends_mid_line is not None:
        notes.append(
            f"{log.path.name}:{log.ends_mid_line}: the file ends inside this iteration line (left out)"
        )
    row["notes"] = [
        *notes,
        *estimate_notes,
        *_scored_as(facts.evaluation if facts else {}),
        *problems,
        *_bad_values(log, log.path.name),
    ]
    curve = (
        [it for it, loss in zip(iterations, log.iterations["loss"], strict=True) if math.isfinite(loss)],
        [loss for loss in log.iterations["loss"] if math.isfinite(loss)],
    )
    warnings = [f"{run.run_dir}/{problem}" for problem in problems] + _bad_values(log, str(log.path))
    return RunSummary({key: row[key] for key in ROW_KEYS}, curve, tokens, warnings, row["name"])


def _bad_values(log: ParsedLog, name: str) -> list[str]:
    """`name:line: what` for each malformed value the log printed (left out), and how many more."""
    lines = [f"{name}:{number}: {what}" for number, what in log.bad_values]
    more = log.bad_value_count - len(log.bad_values)
    return lines + ([f"{name}: {more} more malformed values skipped"] if more else [])


def _epoch_tokens(cfg: dict[str, Any], log: ParsedLog, options: Options) -> tuple[int | None, str | None]:
    if options.epoch_tokens:
        return options.epoch_tokens, "--epoch-tokens"
    if cfg["epoch_tokens"]:
        return int(cfg["epoch_tokens"]), "run.json"
    if log.config.samples_per_epoch and cfg["seq_length"]:
        return int(
            log.config.samples_per_epoch * cfg["seq_length"]
        ), "log (training samples per epoch x seq_length)"
    return None, None
