"""One pass over a log: every line kind the summary needs, streamed into compact
columns (a float array per metric), so a 1 GB log needs megabytes, not gigabytes."""

from __future__ import annotations

import math
import re
from array import array
from dataclasses import dataclass, field
from pathlib import Path

from zerolab.contracts import NOT_USED_LINE, SWITCH_LINE
from zerolab.logs import deepspeed, megatron
from zerolab.logs.config_dump import ConfigCollector
from zerolab.logs.failures import EndingDetector
from zerolab.logs.lines import Line, read_lines

NAN = math.nan
ITERATION_COLUMNS = (
    "iteration",
    "ms_per_iter",
    "tokens_per_s_per_gpu",
    "tflops_per_gpu",
    "samples_per_s",
    "loss",
    "global_batch_size",
    "seq_length",
    "skipped_iterations",
    "nan_iterations",
    "grad_norm",
)
MAX_CONTINUATION_LINES = 3
MAX_BAD_VALUES = 20
"""Malformed values kept (with their line) per log; the rest are only counted."""
_PPL_LINE = re.compile(r"^\s*ppl:\s*([\d.eE+-]+)\s*$")


def _columns(names: tuple[str, ...]) -> dict[str, array]:
    return {name: array("d") for name in names}


@dataclass
class ParsedLog:
    """What one log says. Columns hold NaN where a line did not print a value."""

    path: Path
    size_bytes: int = 0
    lines: int = 0
    cut_lines: int = 0
    ends_mid_line: int | None = None
    """The number of the last line when the file ends inside an iteration line (a log cut off
    mid-write): that line is left out."""
    iterations: dict[str, array] = field(default_factory=lambda: _columns(ITERATION_COLUMNS))
    train_iters: int | None = None
    reporter: str | None = None
    duplicate_iteration_lines: int = 0
    losses_absent: int = 0
    nan_grad_norms: int = 0
    validations: list[megatron.Validation] = field(default_factory=list)
    max_allocated_MB_by_rank: dict[int | None, float] = field(default_factory=dict)
    ds_max_allocated_GB: float | None = None
    see_max_allocated_GB: float | None = None
    host_used_GB: float | None = None
    ds_throughput: dict[str, array] = field(default_factory=lambda: _columns(("step", "samples_per_s")))
    ds_skipped_steps: int | None = None
    overflow_messages: int = 0
    hf_losses: array = field(default_factory=lambda: array("d"))
    hf_train_runtime_s: float | None = None
    config: ConfigCollector = field(default_factory=ConfigCollector)
    ending: EndingDetector = field(default_factory=EndingDetector)
    bad_values: list[tuple[int, str]] = field(default_factory=list)
    """(line number, what) of the first MAX_BAD_VALUES malformed values, each left out."""
    bad_value_count: int = 0
    switches_on: list[str] = field(default_factory=list)
    """The speed switches rank 0 said it turned on (`zerolab: switch NAME: ...`), in order."""
    switches_not_used: list[str] = field(default_factory=list)
    """Those of them a rank said fell back to the engine's own code (`zerolab: NAME: not used: ...`)."""

    @property
    def iteration_count(self) -> int:
        """How many iteration lines were kept (one per log interval)."""
        return len(self.iterations["iteration"])

    @property
    def trained(self) -> bool:
        """Whether the log shows any training step: an iteration line, a DeepSpeed step, an HF
        Trainer loss, or the end of training."""
        return bool(
            self.iteration_count
            or len(self.ds_throughput["step"])
            or len(self.hf_losses)
            or self.ending.completed
        )

    def understood(self) -> str | None:
        """None when the log had something to summarize, else the reason it did not."""
        if self.size_bytes == 0:
            return "empty file"
        if (
            self.iteration_count
            or len(self.ds_throughput["step"])
            or len(self.hf_losses)
            or self.validations
            or self.ending.failure
            or self.ending.completed
            or self.config.args
            or self.config.ds
        ):
            return None
        return (
            f"no line this tool knows in {self.lines} lines (Megatron iteration lines, DeepSpeed "
            "throughput or config lines, HF Trainer metrics, or failure messages)"
        )


class LogParser:
    """Feed lines in order with `feed`, then `finish()` returns the ParsedLog."""

    def __init__(self, path: Path) -> None:
        self.log = ParsedLog(path)
        # an unterminated iteration line: its text, source, lines joined and first line's number
        self._pending: tuple[str, str | None, int, int] | None = None
        self._last_unterminated = False

    def feed(self, line: Line) -> None:
        """Parse one cleaned line."""
        log = self.log
        log.lines += 1
        log.cut_lines += line.cut
        self._last_unterminated = line.unterminated
        text = line.text
        if self._pending is not None and self._continue_pending(line):
            return
        log.ending.feed(line.number, text, line.source, line.host)
        if log.config.feed(text):
            return
        match = megatron.find_iteration(text)
        problem = megatron.iteration_problem(match) if match else None
        if problem:
            self._bad_values(line.number, [problem])
            return
        if match:
            record = megatron.parse_iteration(text, match)
            if record.complete:
                self._accept(record, line.source, line.number)
            else:
                self._pending = (text, line.source, 0, line.number)
            return
        problems: list[str] = []
        self._feed_other(text, problems)
        self._bad_values(line.number, problems)

    def _bad_values(self, number: int, problems: list[str]) -> None:
        log = self.log
        log.bad_value_count += len(problems)
        room = MAX_BAD_VALUES - len(log.bad_values)
        log.bad_values += [(number, problem) for problem in problems[: max(room, 0)]]

    def _continue_pending(self, line: Line) -> bool:
        assert self._pending is not None
        text, source, joins, number = self._pending
        if (
            line.source in (None, source)
            and joins < MAX_CONTINUATION_LINES
            and megatron.is_continuation(line.text)
        ):
            joined = text + line.text
            match = megatron.find_iteration(joined)
            assert match is not None
            record = megatron.parse_iteration(joined, match)
            if record.complete:
                self._pending = None
                self._accept(record, source, number)
            else:
                self._pending = (joined, source, joins + 1, number)
            return True
        self._flush_pending()
        return False

    def _flush_pending(self) -> None:
        if self._pending is not None:
            text, source, _, number = self._pending
            self._pending = None
            match = megatron.find_iteration(text)
            assert match is not None
            self._accept(megatron.parse_iteration(text, match), source, number)

    def _accept(self, record: megatron.IterationRecord, source: str | None, number: int) -> None:
        log = self.log
        if log.iteration_count == 0:
            log.reporter = source
        elif source != log.reporter or record.iteration <= log.iterations["iteration"][-1]:
            log.duplicate_iteration_lines += 1
            return
        self._bad_values(number, record.problems)
        log.train_iters = record.train_iters
        loss = record.loss
        log.losses_absent += loss is None
        values = record.values
        log.nan_grad_norms += math.isnan(values.get("grad_norm", 0.0))
        row = {"iteration": float(record.iteration), "loss": NAN if loss is None else loss}
        for name in ITERATION_COLUMNS:
            log.iterations[name].append(row.get(name, values.get(name, NAN)))

    def _feed_other(self, text: str, problems: list[str]) -> None:
        log = self.log
        if text.startswith("zerolab: "):
            for pattern, names in ((SWITCH_LINE, log.switches_on), (NOT_USED_LINE, log.switches_not_used)):
                found = pattern.match(text)
                if found and found.group(1) not in names:
                    names.append(found.group(1))
            return
        validation = megatron.parse_validation(text)
        if validation:
            log.validations.append(validation)
            return
        for report in megatron.parse_memory_reports(text, problems):
            peak = report.max_allocated_MB if report.max_allocated_MB is not None else report.allocated_MB
            if peak is not None:
                log.max_allocated_MB_by_rank[report.rank] = max(
                    peak, log.max_allocated_MB_by_rank.get(report.rank, 0.0)
                )
        tflops = megatron.parse_effective_tflops(text, problems)
        if tflops is not None and log.iteration_count and math.isnan(log.iterations["tflops_per_gpu"][-1]):
            log.iterations["tflops_per_gpu"][-1] = tflops
        throughput = deepspeed.parse_throughput(text, problems)
        if throughput:
            self._add_throughput(throughput)
            return
        see = deepspeed.parse_see_memory(text, problems)
        if see:
            if see.max_allocated_GB is not None:
                log.see_max_allocated_GB = max(see.max_allocated_GB, log.see_max_allocated_GB or 0.0)
            return
        cpu = deepspeed.parse_cpu_memory(text, problems)
        if cpu is not None:
            log.host_used_GB = max(cpu, log.host_used_GB or 0.0)
            return
        progress = deepspeed.parse_progress(text)
        if progress:
            log.ds_skipped_steps = progress[1]
        if deepspeed.is_overflow(text):
            log.overflow_messages += 1
        hf = deepspeed.parse_hf_dict(text)
        if hf:
            if "loss" in hf:
                log.hf_losses.append(hf["loss"])
            if "eval_loss" in hf:
                log.validations.append(
                    megatron.Validation(-1, hf["eval_loss"], math.exp(min(20.0, hf["eval_loss"])), "eval")
                )
            if "train_runtime" in hf and log.hf_train_runtime_s is None:
                log.hf_train_runtime_s = hf["train_runtime"]
            return
        ppl = _PPL_LINE.match(text) if "ppl:" in text else None
        if ppl:
            value = megatron.parse_number(ppl.group(1))
            if value is not None:
                log.validations.append(
                    megatron.Validation(-1, math.log(value) if value > 0 else None, value, "ppl")
                )

    def _add_throughput(self, line: deepspeed.ThroughputLine) -> None:
        log = self.log
        steps = log.ds_throughput["step"]
        if not steps or line.step > steps[-1]:
            steps.append(float(line.step))
            log.ds_throughput["samples_per_s"].append(
                NAN if line.samples_per_s is None else line.samples_per_s
            )
        peaks = [v for v in (line.max_mem_allocated_GB, line.mem_allocated_GB) if v is not None]
        if peaks:
            log.ds_max_allocated_GB = max(max(peaks), log.ds_max_allocated_GB or 0.0)

    def finish(self) -> ParsedLog:
        """Flush what is pending and return the result. An iteration line still unfinished where
        the file ends is the log cut off mid-write: left out, its line number kept."""
        if self._pending is not None and self._last_unterminated:
            self.log.ends_mid_line = self._pending[3]
            self._pending = None
        self._flush_pending()
        return self.log


def parse_log(path: Path) -> ParsedLog:
    """Parse the log at `path` in one streamed pass."""
    parser = LogParser(path)
    parser.log.size_bytes = path.stat().st_size
    for line in read_lines(path):
        parser.feed(line)
    return parser.finish()
