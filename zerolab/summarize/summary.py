"""One summary row per run: config, status, steady-state throughput, TFLOPs, MFU,
memory and loss. A value the run does not state is None (empty), never 0."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import NamedTuple

from zerolab.contracts import SWITCHES
from zerolab.estimate.runs import estimated_peak_gib
from zerolab.logs.failures import cause_text
from zerolab.logs.parse import ParsedLog
from zerolab.logs.settings import LogSettings
from zerolab.logs.signals import exit_code_words, signal_of_exit
from zerolab.rundir import (
    COMPLETED,
    EVAL_METRICS,
    FAILED,
    KILLED,
    REFUSED,
    SAME_WEIGHTS,
    EvalTask,
    TaskScore,
)
from zerolab.summarize.columns import RUNNING_OR_CUT_OFF, TRUNCATED
from zerolab.summarize.config import offloaded, run_setup, setup_label
from zerolab.summarize.discover import Run
from zerolab.summarize.finetuning import records_as_iterations, task_results
from zerolab.summarize.flops import ModelShape, tflops_per_gpu
from zerolab.summarize.row import SummaryRow
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
    """A row and the per-interval series the plots draw."""

    row: SummaryRow
    loss_curve: tuple[list[float], list[float]] = ([], [])
    tokens_per_s_per_gpu: list[float] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    """Values left out, each naming its file and line or key (`path:line: what`)."""
    run_name: str = ""
    """The run's own name; the row's `name` adds the directory when two runs share it."""


def _finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def _rounded(value: float | None, digits: int = 10) -> float | None:
    value = _finite(value)
    return None if value is None else float(f"{value:.{digits}g}")


class Outcome(NamedTuple):
    """How the run ended: the row's `status`, `cause_kind` and `cause`."""

    status: str
    cause_kind: str | None = None
    cause: str | None = None


def _status(log: ParsedLog, facts: RunDirFacts | None) -> Outcome:
    """The run's status and cause. status.json's own account wins where it has one: a run it says was
    stopped (`killed`: Ctrl-C, SIGTERM, a cancelled job) is killed by what it names, whatever the
    launcher printed as it stopped (torchrun's `SignalException`); a log without status.json (not
    launched by zerolab) is read from its lines."""
    failure = log.ending.failure
    written = facts.status if facts else None
    state = written.state if written else None
    code = written.exit_code if written else None
    exit_code = exit_code_words(code) if code is not None else None
    if written and state == REFUSED:  # a sweep's cell the checks refused: nothing ran
        return Outcome(REFUSED, None, written.cause)
    if written and state == KILLED:
        return Outcome(KILLED, "killed", written.cause if written.cause or not exit_code else exit_code)
    completed_by_count = bool(
        log.iteration_count and log.train_iters and log.iterations["iteration"][-1] >= log.train_iters
    )
    if state == FAILED or (state is None and failure):
        if failure:
            kind, detail = failure.kind, failure.detail
        else:  # status.json's cause, else its exit code: a signal's (a SLURM job's OOM kill) says which
            detail = written.cause if written else None
            signalled = not detail and code is not None and signal_of_exit(code) is not None
            kind = "signal" if signalled else "exception"
        return Outcome(FAILED, kind, cause_text(kind, detail or exit_code))
    if state == COMPLETED and not (log.ending.completed or completed_by_count):
        return Outcome(TRUNCATED, None, _ends_early(log))
    if state == COMPLETED or (state is None and (log.ending.completed or completed_by_count)):
        return Outcome(COMPLETED)
    return Outcome(RUNNING_OR_CUT_OFF)


BEFORE_STOPPED = ("out_of_memory", "nan_or_overflow", "nccl_timeout", "gpu_error")
"""Failure kinds a log of a run that was then stopped is worth a note for: a trouble of its own
before the stop (what the launcher printed as it stopped is not)."""


def _before_stopped(log: ParsedLog, outcome: Outcome) -> list[str]:
    """A note for a killed run whose log shows a failure of its own before it was stopped."""
    failure = log.ending.failure
    if outcome.status != KILLED or failure is None or failure.kind not in BEFORE_STOPPED:
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


def speed_switches(log: ParsedLog) -> str | None:
    """The speed switches a run set apart from their defaults (`+NAME` on, `-NAME` off, `(not used)`
    where it fell back), in the switches' order: "" for the defaults, None for a log naming none."""
    if not log.switches_on:
        return None
    on = set(log.switches_on)
    words = []
    for switch in SWITCHES:
        if (switch.name in on) != switch.default:
            sign = "+" if switch.name in on else "-"
            unused = " (not used)" if switch.name in log.switches_not_used else ""
            words.append(f"{sign}{switch.name}{unused}")
    return " ".join(words)


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


def _tokens_per_s_per_gpu(log: ParsedLog, i: int, setup: LogSettings) -> tuple[float, str] | None:
    col = log.iterations
    tgs = col["tokens_per_s_per_gpu"][i]
    if math.isfinite(tgs):
        return tgs, "log (tgs)"
    seq = _finite(col["seq_length"][i]) or setup.seq_length
    world = setup.world_size
    if not seq or not world:
        return None
    samples = col["samples_per_s"][i]
    if math.isfinite(samples):
        return samples * seq / world, "samples per second x seq_length / world_size"
    batch, ms = _finite(col["global_batch_size"][i]) or setup.global_batch_size, col["ms_per_iter"][i]
    if batch and math.isfinite(ms) and ms > 0:
        return batch * seq / (ms / 1000.0) / world, "global batch x seq_length / iteration time / world_size"
    return None


def _tflops(log: ParsedLog, i: int, setup: LogSettings) -> tuple[float, str] | None:
    col = log.iterations
    batch, ms = _finite(col["global_batch_size"][i]) or setup.global_batch_size, col["ms_per_iter"][i]
    if (
        setup.num_layers
        and setup.hidden_size
        and setup.seq_length
        and setup.padded_vocab_size
        and setup.world_size
        and batch
        and math.isfinite(ms)
        and ms > 0
    ):
        shape = ModelShape(
            setup.num_layers,
            setup.hidden_size,
            setup.seq_length,
            setup.padded_vocab_size,
            setup.ffn_hidden_size,
            setup.recompute_granularity == "full",
        )
        return tflops_per_gpu(
            shape, batch, ms, setup.world_size
        ), "formula (Megatron-DeepSpeed throughput_calculator)"
    value = col["tflops_per_gpu"][i]
    return (value, "log") if math.isfinite(value) else None


class Spread(NamedTuple):
    """A steady-state median and its 10th and 90th percentile, rounded; None without values."""

    median: float | None = None
    p10: float | None = None
    p90: float | None = None


def _spread(values: list[float], digits: int = 10) -> Spread:
    result = spread(values)
    if result is None:
        return Spread()
    return Spread(_rounded(result.median, digits), _rounded(result.p10, digits), _rounded(result.p90, digits))


class Memory(NamedTuple):
    """Peak GPU and host memory (GiB) with where each came from."""

    max_allocated_GiB: float | None = None
    max_allocated_source: str | None = None
    peak_host_GiB: float | None = None
    peak_host_source: str | None = None


def _memory(log: ParsedLog, facts: RunDirFacts | None) -> Memory:
    """Peak GPU and host memory with their sources; none for a run that never reached its first
    step (what it measured while starting is no run's figure)."""
    if not log.trained:
        return Memory()
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
    return Memory(_rounded(gpu, 6), gpu_source, _rounded(host, 6), host_source)


class Estimate(NamedTuple):
    """`zerolab estimate`'s predicted peak allocated (GiB) for the run's setup, its error against the
    measured peak in %, and a note when a run with measured memory has none."""

    peak_GiB: float | None
    error_pct: float | None
    notes: list[str]


def _estimate(run: Run, log: ParsedLog, measured_gib: float | None) -> Estimate:
    """The estimate of the run's peak and its error, (estimate - measured) / measured."""
    predicted, reason = estimated_peak_gib(run.run_dir, log)
    error = (
        100.0 * (predicted - measured_gib) / measured_gib if predicted is not None and measured_gib else None
    )
    notes = [f"no memory estimate: {reason}"] if reason and measured_gib is not None else []
    return Estimate(_rounded(predicted, 6), _rounded(error, 3), notes)


class Losses(NamedTuple):
    """The first and last training loss, and the last validation's loss, perplexity and iteration."""

    first: float | None
    last: float | None
    val_loss: float | None
    val_ppl: float | None
    val_iteration: int | None


def _losses(log: ParsedLog) -> Losses:
    losses = [v for v in log.iterations["loss"] if math.isfinite(v)] or [
        v for v in log.hf_losses if math.isfinite(v)
    ]
    plain = [v for v in log.validations if v.label in ("validation", "valid")] or log.validations
    last_val = plain[-1] if plain else None
    return Losses(
        first=losses[0] if losses else None,
        last=losses[-1] if losses else None,
        val_loss=_finite(last_val.loss) if last_val else None,
        val_ppl=_finite(last_val.ppl) if last_val else None,
        val_iteration=last_val.iteration if last_val and last_val.iteration >= 0 else None,
    )


@dataclass(frozen=True)
class Scores:
    """eval.json's scores (`zerolab eval`) as the row's columns: a task's metric, where its examples
    came from, and the checkpoint scored."""

    tasks: dict[str, TaskScore]

    def metric(self, task: EvalTask, metric: str) -> float | None:
        """A task's metric (one of rundir.EVAL_METRICS[task]); None when not scored."""
        score = self.tasks.get(task)
        return _finite(score.metrics.get(metric)) if score else None

    def data(self, task: EvalTask) -> str | None:
        """Where the task's examples came from: `sample`, `hub` or `run`."""
        score = self.tasks.get(task)
        return score.data if score else None

    @property
    def iteration(self) -> int | None:
        """The checkpoint scored: that of the last task (in EVAL_METRICS' order) that names one."""
        scored = [self.tasks[task].iteration for task in EVAL_METRICS if task in self.tasks]
        return next((iteration for iteration in reversed(scored) if iteration is not None), None)

    @property
    def hellaswag_scorer(self) -> str | None:
        """What computed HellaSwag's log-likelihoods: `zerolab` or `lm-eval`."""
        score = self.tasks.get("hellaswag")
        return score.scorer if score else None

    def scored_as(self) -> list[str]:
        """A note where the scores are another run's: its checkpoint holds the same weights."""
        for score in self.tasks.values():
            if score.same_weights_as:
                difference = score.weights_difference or 0.0
                return [
                    f"{SCORED_AS}{score.same_weights_as}, whose checkpoint holds the same weights "
                    f"within {SAME_WEIGHTS:g} (largest difference {difference:.1g}): scored once"
                ]
        return []


SCORED_AS = "eval scores: those of "
"""How a run's note begins where its eval.json holds another run's scores (summary.md gathers them)."""


def _run_name(run: Run, facts: RunDirFacts | None) -> str:
    if run.run_dir is not None:
        name = facts.run.name if facts and facts.run else None
        return name or run.run_dir.name
    assert run.log is not None
    return run.log.stem


def summarize_run(run: Run, log: ParsedLog, facts: RunDirFacts | None, options: Options) -> RunSummary:
    """The summary row of one run (and the series its plots need)."""
    run_facts = facts.run if facts else None
    setup = run_setup(run_facts, log)
    if facts and facts.finetune and not log.iteration_count:
        records_as_iterations(log, facts.finetune, setup.world_size)
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
            if setup.seq_length and setup.world_size and math.isfinite(rate):
                tokens.append(rate * setup.seq_length / setup.world_size)
                tokens_source = "DeepSpeed CurrSamplesPerSec x seq_length / world_size"
            if setup.global_batch_size and math.isfinite(rate) and rate > 0:
                ms.append(setup.global_batch_size / rate * 1000.0)
            continue
        ms.append(log.iterations["ms_per_iter"][i])
        samples.append(log.iterations["samples_per_s"][i])
        found = _tokens_per_s_per_gpu(log, i, setup)
        if found:
            tokens.append(found[0])
            tokens_source = tokens_source or found[1]
        found = _tflops(log, i, setup)
        if found:
            tflops.append(found[0])
            tflops_source = tflops_source or found[1]
    outcome = _status(log, facts)
    notes += _before_stopped(log, outcome)
    tokens_spread, ms_spread, tflops_spread = _spread(tokens), _spread(ms), _spread(tflops)
    samples_spread = spread(samples)
    epoch_tokens, epoch_source = _epoch_tokens(setup, log, options)
    world, rate = setup.world_size, tokens_spread.median
    peak, peak_source = options.peak_tflops, "--peak-tflops"
    if peak is None and facts and facts.device_peak_tflops:
        peak, peak_source = facts.device_peak_tflops, f"doctor.json: {facts.device_name}"
    memory = _memory(log, facts)
    estimate = _estimate(run, log, memory.max_allocated_GiB)
    losses = _losses(log)
    scores = Scores(facts.evaluation if facts else {})
    task = task_results(run_facts.task if run_facts else None, facts.finetune if facts else [])
    problems = facts.problems if facts else []
    if log.ends_mid_line is not None:
        notes.append(
            f"{log.path.name}:{log.ends_mid_line}: the file ends inside this iteration line (left out)"
        )
    row = SummaryRow(
        name=_run_name(run, facts),
        setup=setup_label(setup),
        engine=run_facts.engine if run_facts else None,
        path=str(run.path),
        sweep=None,  # a sweep's cell: zerolab.summarize.sweeps
        model=setup.model,
        num_layers=setup.num_layers,
        hidden_size=setup.hidden_size,
        ffn_hidden_size=setup.ffn_hidden_size,
        seq_length=setup.seq_length,
        padded_vocab_size=setup.padded_vocab_size,
        world_size=setup.world_size,
        nodes=setup.nodes,
        tensor_parallel=setup.tensor_parallel,
        pipeline_parallel=setup.pipeline_parallel,
        zero_stage=setup.zero_stage,
        offload=offloaded(setup),
        offload_param=setup.offload_param,
        micro_batch_size=setup.micro_batch_size,
        global_batch_size=setup.global_batch_size,
        precision=setup.precision,
        speed_switches=speed_switches(log),
        resumed_from=setup.resumed_from,
        resumed_iteration=setup.resumed_iteration,
        status=outcome.status,
        cause_kind=outcome.cause_kind,
        cause=outcome.cause,
        anomalies=_anomalies(log),
        iterations_done=int(steps[-1]) if steps else None,
        train_iters=log.train_iters or (run_facts.train_iters if run_facts else None),
        warmup_until_iteration=int(cutoff) if steps else None,
        steady_intervals=len(steady),
        tokens_per_s_per_gpu=tokens_spread.median,
        tokens_per_s_per_gpu_p10=tokens_spread.p10,
        tokens_per_s_per_gpu_p90=tokens_spread.p90,
        tokens_per_s_per_gpu_source=tokens_source,
        samples_per_s=_rounded(samples_spread.median) if samples_spread else None,
        ms_per_iter=ms_spread.median,
        ms_per_iter_p10=ms_spread.p10,
        ms_per_iter_p90=ms_spread.p90,
        epoch_time_s=_rounded(epoch_tokens / (rate * world), 6) if epoch_tokens and rate and world else None,
        epoch_tokens=epoch_tokens,
        epoch_tokens_source=epoch_source,
        tflops_per_gpu=tflops_spread.median,
        tflops_per_gpu_p10=tflops_spread.p10,
        tflops_per_gpu_p90=tflops_spread.p90,
        tflops_per_gpu_source=tflops_source,
        mfu_pct=_rounded(100.0 * tflops_spread.median / peak, 3) if peak and tflops_spread.median else None,
        peak_tflops=peak,
        peak_tflops_source=peak_source if peak else None,
        max_allocated_GiB=memory.max_allocated_GiB,
        max_allocated_source=memory.max_allocated_source,
        estimated_peak_GiB=estimate.peak_GiB,
        estimate_error_pct=estimate.error_pct,
        peak_host_GiB=memory.peak_host_GiB,
        peak_host_source=memory.peak_host_source,
        last_loss=losses.last,
        first_loss=losses.first,
        val_loss=losses.val_loss,
        val_ppl=losses.val_ppl,
        val_iteration=losses.val_iteration,
        eval_val_ppl=scores.metric("val", "ppl"),
        eval_val_loss=scores.metric("val", "loss"),
        eval_val_data=scores.data("val"),
        eval_iteration=scores.iteration,
        eval_wikitext_ppl=scores.metric("wikitext", "ppl"),
        eval_wikitext_loss=scores.metric("wikitext", "loss"),
        eval_wikitext_data=scores.data("wikitext"),
        eval_hellaswag_acc_norm=scores.metric("hellaswag", "acc_norm"),
        eval_hellaswag_acc=scores.metric("hellaswag", "acc"),
        eval_hellaswag_acc_norm_chars=scores.metric("hellaswag", "acc_norm_chars"),
        eval_hellaswag_data=scores.data("hellaswag"),
        eval_hellaswag_scorer=scores.hellaswag_scorer,
        task_score=task.score,
        task=task.task,
        task_metric=task.metric,
        task_scores=task.scores,
        notes=[*notes, *estimate.notes, *scores.scored_as(), *problems, *_bad_values(log, log.path.name)],
    )
    curve = (
        [it for it, loss in zip(iterations, log.iterations["loss"], strict=True) if math.isfinite(loss)],
        [loss for loss in log.iterations["loss"] if math.isfinite(loss)],
    )
    warnings = [f"{run.run_dir}/{problem}" for problem in problems] + _bad_values(log, str(log.path))
    return RunSummary(row, curve, tokens, warnings, row.name)


def _bad_values(log: ParsedLog, name: str) -> list[str]:
    """`name:line: what` for each malformed value the log printed (left out), and how many more."""
    lines = [f"{name}:{number}: {what}" for number, what in log.bad_values]
    more = log.bad_value_count - len(log.bad_values)
    return lines + ([f"{name}: {more} more malformed values skipped"] if more else [])


def _epoch_tokens(setup: LogSettings, log: ParsedLog, options: Options) -> tuple[int | None, str | None]:
    if options.epoch_tokens:
        return options.epoch_tokens, "--epoch-tokens"
    if setup.epoch_tokens:
        return setup.epoch_tokens, "run.json"
    if log.config.samples_per_epoch and setup.seq_length:
        return int(
            log.config.samples_per_epoch * setup.seq_length
        ), "log (training samples per epoch x seq_length)"
    return None, None
