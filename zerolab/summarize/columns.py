"""The summary's columns, declared once: each row key with what it means, and for the ones a
person reads, the label with its unit, how a cell shows it, and whether higher or lower is
better. summary.json and summary.csv hold the keys in this order; the tables, `zerolab compare`,
the plots and docs/summarize.md (`python -m zerolab.summarize.columns`) loop over this list.
Adding a metric is one Column here, its field in row.py (SummaryRow, in this order) and its value
in summary.py."""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from zerolab.files import generated_doc_main, with_section
from zerolab.locations import REPO_ROOT
from zerolab.rundir import COMPLETED, FAILED, KILLED, REFUSED
from zerolab.summarize.row import SummaryRow
from zerolab.sweep.values import value_text

RUNNING_OR_CUT_OFF, TRUNCATED = "running_or_cut_off", "truncated"
"""A summary's own statuses of a run, beside status.json's (rundir) completed, failed, killed and
refused."""

STATUS_LABELS = {
    COMPLETED: "completed",
    RUNNING_OR_CUT_OFF: "running or cut off",
    TRUNCATED: "log ends early",
    FAILED: "failed",
    KILLED: "killed",
    REFUSED: "refused",
}
"""The words a summary shows for each status of a run."""


def number(value: Any, digits: int = 3) -> str:
    """A value for a table: 3 significant digits (or whole with thousands separators), empty for None."""
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:,.{digits}g}" if abs(value) < 10**digits else f"{value:,.0f}"
    return str(value)


def duration(seconds: float | None) -> str:
    """`22.6 s`, `4.1 min`, `3.2 h`, `2.5 d`."""
    if seconds is None:
        return ""
    for unit, size in (("d", 86400.0), ("h", 3600.0), ("min", 60.0)):
        if seconds >= 2 * size:
            return f"{seconds / size:.1f} {unit}"
    return f"{seconds:.1f} s"


@dataclass(frozen=True)
class Plot:
    """A bar chart of a column, one bar per run."""

    file: str
    title: str
    subtitle: str
    spread: tuple[str, str] | None = None
    """Row keys of the whisker's low and high ends."""
    bar_text: str = "{:.3g}"
    durations: bool = False
    """Values are seconds, drawn in the unit that suits the largest."""


@dataclass(frozen=True)
class Column:
    """A row key and what it means; `label` (its unit in it) makes it a table column."""

    key: str
    doc: str
    label: str | None = None
    header: str | None = None
    """The table's header when it says more than the label (default: the label)."""
    companions: tuple[str, ...] = ()
    """Further row keys documented with this one (its spread, where it came from)."""
    show: Callable[[Any], str] | None = None
    """How a value is written in a table or comparison (default: `number`)."""
    cell: Callable[[SummaryRow], str] | None = None
    """How the table cell is made from the whole row, when it combines keys."""
    better: Literal["higher", "lower"] | None = None
    """A metric: `zerolab compare` divides it by the baseline's."""
    terminal: int | None = None
    """Its rank in the printed table (summary.md has every labelled column): where the terminal is
    too narrow for all of them, the lowest ranks are kept, those up to TERMINAL_ALWAYS always (the
    table goes on in another); None: summary.md only."""
    plot: Plot | None = None

    @property
    def table_header(self) -> str:
        """The header of this column in the tables."""
        return self.header or self.label or self.key

    @property
    def keys(self) -> tuple[str, ...]:
        """The row keys this column documents, its own first."""
        return (self.key, *self.companions)

    def text(self, value: Any) -> str:
        """One value as a table or comparison shows it."""
        return (self.show or (lambda v: number(v, 4)))(value)

    def table_cell(self, row: SummaryRow) -> str:
        """This column's cell for `row`."""
        return self.cell(row) if self.cell else self.text(row[self.key])

    @property
    def better_words(self) -> str:
        """`higher is better` or `lower is better`."""
        return f"{self.better} is better"


def _spread(key: str) -> Callable[[SummaryRow], str]:
    def cell(row: SummaryRow) -> str:
        median, p10, p90 = row[key], row[f"{key}_p10"], row[f"{key}_p90"]
        if median is None:
            return ""
        if p10 is None or p10 == p90:
            return number(median, 4)
        return f"{number(median, 4)} [{number(p10, 4)}-{number(p90, 4)}]"

    return cell


def _batch(row: SummaryRow) -> str:
    if row.micro_batch_size is None and row.global_batch_size is None:
        return ""
    return f"{number(row.micro_batch_size)}/{number(row.global_batch_size)}"


def _ranks(row: SummaryRow) -> str:
    """`2`, or `2 on 2 nodes` for a run over several nodes."""
    nodes = row.nodes
    return number(row.world_size) + (f" on {nodes} nodes" if nodes and nodes > 1 else "")


def _loss(row: SummaryRow) -> str:
    if row.first_loss is None:
        return ""
    return f"{row.first_loss:.3f} → {row.last_loss:.3f}"


def _val(row: SummaryRow) -> str:
    parts = [f"{row.val_loss:.3f}" if row.val_loss is not None else "", number(row.val_ppl, 4)]
    return " / ".join(parts) if any(parts) else ""


def _scored(key: str, data_key: str, show: Callable[[Any], str]) -> Callable[[SummaryRow], str]:
    """An eval.json metric's cell, `(sample)` after it when it was scored on zerolab's shipped sample."""

    def cell(row: SummaryRow) -> str:
        if row[key] is None:
            return ""
        return show(row[key]) + (" (sample)" if row[data_key] == "sample" else "")

    return cell


def _task_score(row: SummaryRow) -> str:
    """`mrpc f1 0.873`."""
    if row.task_score is None:
        return ""
    return f"{row.task} {row.task_metric} {row.task_score:.3f}"


def _estimate(row: SummaryRow) -> str:
    """`7.89 (+0.8%)`: zerolab estimate's predicted peak and its error against max allocated."""
    if row.estimated_peak_GiB is None:
        return ""
    error = row.estimate_error_pct
    return number(row.estimated_peak_GiB) + (f" ({error:+.1f}%)" if error is not None else "")


def _status(row: SummaryRow) -> str:

    text = STATUS_LABELS[row.status]
    if row.cause:
        text += f": {row.cause}"
    if row.anomalies:
        text += " (NaN or overflow seen)"
    return text


def _loss_value(value: Any) -> str:
    return "" if value is None else f"{value:.3f}"


def _resumed(row: SummaryRow) -> str:
    if row.resumed_from is None:
        return ""
    return f"{Path(row.resumed_from).name}@{row.resumed_iteration}"


COLUMNS: tuple[Column, ...] = (
    Column("name", "run name (run.json, or the log file's stem)", label="run", terminal=1),
    Column(
        "setup",
        "the ZeRO setup: its configs/zero/ block's name (`z0`, `z1`, `z2`, `z3`, `z3_offload`, "
        "`z3_offload_param`; `z2_offload` when a stage below 3 offloads), prefixed `tpT_ppP_` with "
        "model parallelism",
        label="setup",
        show=lambda value: value or "",
        terminal=9,
    ),
    Column(
        "engine",
        "what trained the run (run.json): `megatron-deepspeed` (pretrain_gpt.py), `fsdp2` (zerolab's FSDP2 "
        "loop on the same recipe, docs/engines.md) or `deepspeed` (the fine-tuning loop); empty: a log "
        "without run.json",
        label="engine",
        show=lambda value: value or "",
    ),
    Column("path", "the run directory or log file"),
    Column(
        "sweep",
        "a sweep's cell (`zerolab sweep`, docs/sweep.md): its value of each swept key, `{key: value}`; "
        "null outside a sweep. The tables show each swept key as a column after `run` (summary.csv: "
        "`sweep.KEY`)",
    ),
    Column("model", "the model (e.g. `gpt2-1.5b`)", label="model", show=lambda v: v or ""),
    Column(
        "num_layers",
        "the model's shape",
        companions=("hidden_size", "ffn_hidden_size", "seq_length", "padded_vocab_size"),
    ),
    Column(
        "world_size",
        "ranks, and the machines they ran on (`nodes`; the table says `8 on 2 nodes` past one)",
        label="GPUs",
        companions=("nodes",),
        cell=_ranks,
        terminal=16,
    ),
    Column("tensor_parallel", "tensor- and pipeline-parallel sizes", companions=("pipeline_parallel",)),
    Column("zero_stage", "ZeRO stage", label="ZeRO"),
    Column(
        "offload",
        "optimizer (or weight) offload to the CPU; `offload_param`: the weights too",
        label="offload",
        companions=("offload_param",),
        show=lambda value: {True: "yes", False: "no", None: ""}[value],
    ),
    Column(
        "micro_batch_size",
        "sequences per micro batch per rank, and per optimizer step",
        label="micro/global batch",
        companions=("global_batch_size",),
        cell=_batch,
        terminal=17,
    ),
    Column("precision", "`fp32`, `bf16` or `fp16`", label="precision", show=lambda v: v or "", terminal=18),
    Column(
        "speed_switches",
        "the speed switches (docs/speed.md) that differ from their defaults, as train.log names them: "
        "`+compiled_layers` on, `-manual_gc` off; `(not used)` where the run's layout fell back to the "
        "engine's own code (e.g. `coalesced_grad_reduction` at ZeRO-0). Empty: the defaults; null: a log "
        "that names no switch",
        label="speed switches",
        show=lambda value: value or "",
    ),
    Column(
        "resumed_from",
        "the run whose checkpoint this one continues (`zerolab launch --resume`, `zerolab sweep --resume`), "
        "and that checkpoint's iteration (`resumed_iteration`); the table says `RUN@ITERATION`. Null: the "
        "run started afresh",
        label="resumed from",
        companions=("resumed_iteration",),
        cell=_resumed,
    ),
    Column(
        "status",
        "`completed`, `running_or_cut_off`, `truncated` (status.json says completed, but the log ends "
        "before the last iteration), `failed`, `killed` (status.json says it was stopped: Ctrl-C, SIGTERM, "
        "a cancelled SLURM job; its cause says by what, whatever the launcher printed as it stopped) or "
        "`refused` (a sweep's cell whose recipe the checks refused: nothing ran); a failure's kind: "
        "`out_of_memory`, `nan_or_overflow`, `nccl_timeout`, `gpu_error`, `signal` (a rank killed by a "
        "signal, or a run whose status.json gives no cause and an exit code that says one: `exit code 137: "
        "killed by SIGKILL (signal 9)...`), `killed` or `exception`; the cause with the line that says it "
        "(a refusal: the checks' message; a killed run: status.json's cause, else its exit code in words). "
        "A log without status.json is read from its lines",
        label="status",
        companions=("cause_kind", "cause"),
        cell=_status,
        terminal=2,
    ),
    Column(
        "anomalies",
        "NaN/overflow seen without stopping the run: skipped iterations, NaN grad norms, loss not printed",
    ),
    Column(
        "iterations_done",
        "the last logged iteration, and the run's target",
        label="iterations",
        companions=("train_iters",),
        terminal=19,
    ),
    Column(
        "warmup_until_iteration",
        "logged intervals up to this iteration are warm-up; how many intervals the steady state uses",
        companions=("steady_intervals",),
    ),
    Column(
        "tokens_per_s_per_gpu",
        "steady-state median and 10th/90th percentile; from `tgs`, else samples/s x seq / world size, else "
        "global batch x seq / iteration time / world size",
        label="tokens/s per GPU",
        header="tokens/s per GPU median [p10-p90]",
        companions=("tokens_per_s_per_gpu_p10", "tokens_per_s_per_gpu_p90", "tokens_per_s_per_gpu_source"),
        cell=_spread("tokens_per_s_per_gpu"),
        better="higher",
        terminal=3,
        plot=Plot(
            "throughput.png",
            "Training throughput per GPU",
            "bar: median, whisker: 10th-90th percentile of logged intervals; {warmup}",
            spread=("tokens_per_s_per_gpu_p10", "tokens_per_s_per_gpu_p90"),
            bar_text="{:,.0f}",
        ),
    ),
    Column("samples_per_s", "steady-state median of samples per second"),
    Column(
        "ms_per_iter",
        "steady-state median (and 10th/90th percentile) time per iteration",
        label="ms/iteration",
        companions=("ms_per_iter_p10", "ms_per_iter_p90"),
        better="lower",
        terminal=8,
    ),
    Column(
        "epoch_time_s",
        "time for one epoch at the steady rate; `epoch_tokens`: tokens of one epoch (`--epoch-tokens`, "
        "run.json, or the log's training samples per epoch x seq length)",
        label="time per epoch",
        header="time/epoch",
        companions=("epoch_tokens", "epoch_tokens_source"),
        show=duration,
        better="lower",
        terminal=12,
        plot=Plot(
            "epoch_time.png",
            "Time for one epoch of the training data",
            "epoch tokens / (steady-state tokens/s per GPU x GPUs)",
            durations=True,
        ),
    ),
    Column(
        "tflops_per_gpu",
        "from the formula of Megatron-DeepSpeed's `throughput_calculator` when the shapes are known (the "
        "log's 2-decimal value loses precision on small models), else as the log prints it",
        label="TFLOP/s per GPU",
        companions=("tflops_per_gpu_p10", "tflops_per_gpu_p90", "tflops_per_gpu_source"),
        show=number,
        better="higher",
        terminal=13,
    ),
    Column(
        "mfu_pct",
        "model FLOPs utilization: TFLOPs / the peak dense bf16/fp16 TFLOP/s (`peak_tflops`: "
        "`--peak-tflops`, or doctor.json's GPU: A10 125, A40 149.7, A100 312, H100 PCIe 756, H100 SXM "
        "989.4, H200 989.4)",
        label="MFU %",
        companions=("peak_tflops", "peak_tflops_source"),
        show=number,
        better="higher",
        terminal=14,
    ),
    Column(
        "max_allocated_GiB",
        "largest of Megatron's max allocated, DeepSpeed's MaxMemAllocated and see_memory_usage's Max_MA "
        "(GiB)",
        label="max allocated GiB",
        companions=("max_allocated_source",),
        show=number,
        better="lower",
        terminal=5,
        plot=Plot(
            "gpu_memory.png",
            "Peak accelerator memory allocated per GPU",
            "largest of Megatron's memory report and DeepSpeed's MaxMemAllocated / Max_MA, over ranks",
        ),
    ),
    Column(
        "estimated_peak_GiB",
        "`zerolab estimate`'s predicted peak allocated for the run's setup (from the run directory's "
        "`recipe.yaml`, or a plain log's argument dump) and its error against `max_allocated_GiB`, "
        "(estimate - measured) / measured in %; empty for CPU runs (their max allocated is resident "
        "memory) and where the log does not state the settings, with the reason in `notes` "
        "(docs/estimate.md)",
        label="estimate GiB (error %)",
        companions=("estimate_error_pct",),
        cell=_estimate,
        terminal=15,
    ),
    Column(
        "peak_host_GiB",
        "samples.csv's process tree RSS, else see_memory_usage's whole-machine \"CPU Virtual Memory used\"",
        label="peak host GiB",
        companions=("peak_host_source",),
        show=number,
        better="lower",
        terminal=6,
        plot=Plot(
            "host_memory.png",
            "Peak host memory",
            "run directories: launcher process tree RSS; plain logs: DeepSpeed's whole-machine CPU used",
        ),
    ),
    Column(
        "last_loss",
        "training loss (lm loss; a fine-tuning's: its task's loss) at the first and last logged interval",
        label="last training loss",
        header="loss first → last",
        companions=("first_loss",),
        show=_loss_value,
        cell=_loss,
        better="lower",
        terminal=7,
    ),
    Column(
        "val_loss",
        "the last validation: loss, perplexity and iteration",
        label="validation loss",
        header="val loss / PPL",
        companions=("val_ppl", "val_iteration"),
        show=_loss_value,
        cell=_val,
        better="lower",
    ),
    Column(
        "eval_val_ppl",
        "`zerolab eval --task val` (eval.json): perplexity and loss of the checkpoint over the run's whole "
        "validation split (all of it, where the log's `val_ppl` is Megatron's draw of eval_iters batches); "
        "`eval_iteration`: the checkpoint scored",
        label="eval val PPL",
        companions=("eval_val_loss", "eval_val_data", "eval_iteration"),
        show=lambda value: number(value, 4),
        better="lower",
    ),
    Column(
        "eval_wikitext_ppl",
        "`zerolab eval --task wikitext`: WikiText-103 test perplexity (a sliding window of the model's "
        "context); `(sample)` in the tables: on the 3-article sample shipped with zerolab, not comparable "
        "with published figures",
        label="WikiText PPL",
        companions=("eval_wikitext_loss", "eval_wikitext_data"),
        cell=_scored("eval_wikitext_ppl", "eval_wikitext_data", lambda value: number(value, 4)),
        better="lower",
        terminal=10,
    ),
    Column(
        "eval_hellaswag_acc_norm",
        "`zerolab eval --task hellaswag`: HellaSwag validation accuracy, the ending with the highest mean "
        "log-likelihood per token (`acc_norm`), with the highest sum (`acc`) and the highest per character "
        "(`acc_norm_chars`, lm-evaluation-harness's acc_norm); chance is 0.25; `(sample)`: on the 101-task "
        "sample shipped with zerolab; `eval_hellaswag_scorer`: `zerolab` or `lm-eval`, what computed the "
        "log-likelihoods",
        label="HellaSwag acc_norm",
        companions=(
            "eval_hellaswag_acc",
            "eval_hellaswag_acc_norm_chars",
            "eval_hellaswag_data",
            "eval_hellaswag_scorer",
        ),
        cell=_scored("eval_hellaswag_acc_norm", "eval_hellaswag_data", lambda value: f"{value:.3f}"),
        better="higher",
        terminal=11,
    ),
    Column(
        "task_score",
        "a fine-tuning run's GLUE score: the task's official metric (`task_metric`: the first of them, "
        "CoLA's Matthews correlation, MRPC's and QQP's F1, STS-B's Pearson, the rest's accuracy) on its "
        "first validation split (MNLI: matched) after the last epoch; `task_scores`: every split's "
        "metrics and loss; `task`: the GLUE task (null: pretraining)",
        label="GLUE score",
        companions=("task", "task_metric", "task_scores"),
        cell=_task_score,
        better="higher",
        terminal=4,
    ),
    Column(
        "notes",
        "what the summary had to assume, unreadable run-directory files, and why a run with measured memory "
        "has no estimate",
    ),
)

TERMINAL_ALWAYS = 8
"""The printed table's columns ranked up to this (run, status, and the numbers a user came for:
tokens/s per GPU, GLUE score, max allocated and peak host memory, loss, ms/iteration) are never
left out for want of width, unless empty for every run: where they do not fit one table, the table
goes on in another, the run's name first in each. Columns ranked after them are left out first."""

TABLE: tuple[Column, ...] = tuple(column for column in COLUMNS if column.label)
"""summary.md's columns, in order (the printed table has those with a `terminal` rank)."""


def swept_column(key: str) -> Column:
    """The table column of a swept key: each row's value of it (empty outside the sweep); ranked
    with the setup, after the numbers (a cell's name says its values too)."""

    def cell(row: SummaryRow) -> str:
        values = row.sweep or {}
        return value_text(values[key]) if key in values else ""

    return Column(f"sweep.{key}", f"the swept key `{key}`", label=key, cell=cell, terminal=9)


def table_columns(sweep_keys: list[str]) -> tuple[Column, ...]:
    """TABLE with a column for each swept key after the run's name."""
    return (TABLE[0], *(swept_column(key) for key in sweep_keys), *TABLE[1:])


METRICS: tuple[Column, ...] = tuple(column for column in COLUMNS if column.better)
"""What `zerolab compare` divides by the baseline's."""

ROW_KEYS: tuple[str, ...] = tuple(key for column in COLUMNS for key in column.keys)
"""Every key of a summary row, in the order summary.json and summary.csv hold them."""

DOC_FILE = REPO_ROOT / "docs" / "summarize.md"
_BEGIN = "<!-- columns: generated from zerolab/summarize/columns.py by `make docs`; do not edit -->"
_END = "<!-- end of columns -->"


def columns_markdown() -> str:
    """The columns table of docs/summarize.md."""
    lines = ["| key | shown as | meaning |", "|---|---|---|"]
    for column in COLUMNS:
        keys = ", ".join(f"`{key}`" for key in column.keys)
        shown = column.table_header if column.label else ""
        if column.better:
            shown += f" ({column.better_words})"
        lines.append(f"| {keys} | {shown} | {column.doc} |")
    return "\n".join(lines) + "\n"


def current_doc() -> str:
    """docs/summarize.md with its columns table as COLUMNS says."""
    return with_section(DOC_FILE.read_text(), _BEGIN, _END, columns_markdown())


def main(argv: list[str] | None = None) -> int:
    """Rewrite docs/summarize.md's columns table, or with --check report whether it is stale."""
    return generated_doc_main(DOC_FILE, current_doc, argv)


if __name__ == "__main__":
    sys.exit(main())
