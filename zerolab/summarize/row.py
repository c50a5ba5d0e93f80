"""A summary row, typed: one field per row key that zerolab.summarize.columns declares, in the
registry's order (tests/unit/test_summarize_row.py fails when the two differ). summary.py builds it in
one constructor call; the tables, `zerolab compare`, the plots and the sweep's read its fields,
and the registry's generic loops read a column by its key (`row[key]`). A value the run does not
state is None, never 0."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, fields
from typing import Any


@dataclass
class SummaryRow:
    """One run's row (zerolab.summarize.columns says what each field means)."""

    name: str
    setup: str | None
    engine: str | None
    path: str
    sweep: dict[str, Any] | None
    model: str | None
    num_layers: int | None
    hidden_size: int | None
    ffn_hidden_size: int | None
    seq_length: int | None
    padded_vocab_size: int | None
    world_size: int | None
    nodes: int | None
    tensor_parallel: int | None
    pipeline_parallel: int | None
    zero_stage: int | None
    offload: bool | None
    offload_param: bool | None
    micro_batch_size: int | None
    global_batch_size: int | None
    precision: str | None
    speed_switches: str | None
    resumed_from: str | None
    resumed_iteration: int | None
    status: str
    cause_kind: str | None
    cause: str | None
    anomalies: list[str]
    iterations_done: int | None
    train_iters: int | None
    warmup_until_iteration: int | None
    steady_intervals: int
    tokens_per_s_per_gpu: float | None
    tokens_per_s_per_gpu_p10: float | None
    tokens_per_s_per_gpu_p90: float | None
    tokens_per_s_per_gpu_source: str | None
    samples_per_s: float | None
    ms_per_iter: float | None
    ms_per_iter_p10: float | None
    ms_per_iter_p90: float | None
    epoch_time_s: float | None
    epoch_tokens: int | None
    epoch_tokens_source: str | None
    tflops_per_gpu: float | None
    tflops_per_gpu_p10: float | None
    tflops_per_gpu_p90: float | None
    tflops_per_gpu_source: str | None
    mfu_pct: float | None
    peak_tflops: float | None
    peak_tflops_source: str | None
    max_allocated_GiB: float | None
    max_allocated_source: str | None
    estimated_peak_GiB: float | None
    estimate_error_pct: float | None
    peak_host_GiB: float | None
    peak_host_source: str | None
    last_loss: float | None
    first_loss: float | None
    val_loss: float | None
    val_ppl: float | None
    val_iteration: int | None
    eval_val_ppl: float | None
    eval_val_loss: float | None
    eval_val_data: str | None
    eval_iteration: int | None
    eval_wikitext_ppl: float | None
    eval_wikitext_loss: float | None
    eval_wikitext_data: str | None
    eval_hellaswag_acc_norm: float | None
    eval_hellaswag_acc: float | None
    eval_hellaswag_acc_norm_chars: float | None
    eval_hellaswag_data: str | None
    eval_hellaswag_scorer: str | None
    task_score: float | None
    task: str | None
    task_metric: str | None
    task_scores: dict[str, dict[str, Any]] | None
    notes: list[str]

    def __getitem__(self, key: str) -> Any:
        """The value of the row key `key` (a column of the registry); KeyError for another."""
        if key not in ROW_FIELDS:
            raise KeyError(key)
        return getattr(self, key)

    def items(self) -> Iterator[tuple[str, Any]]:
        """(key, value) of every row key, in the registry's order (summary.json and summary.csv)."""
        return ((key, getattr(self, key)) for key in ROW_FIELDS)


ROW_FIELDS: tuple[str, ...] = tuple(field.name for field in fields(SummaryRow))
"""SummaryRow's fields in order: the registry's ROW_KEYS (a test holds them equal)."""
