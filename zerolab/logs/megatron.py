"""Parsers for the lines Megatron-LM and Megatron-DeepSpeed print: the iteration
line in all its generations (FORMATS.md section 1), validation blocks, memory
reports and the old `Effective Tera Flops` line."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

ITERATION = re.compile(r"(?:^|[\s\]])iteration[=:]?\s*(\d+)\s*/\s*(\d+)\s*\|")
_SEGMENT_KV = re.compile(r"^\s*(.+?)\s*[:=]\s*(\S+)\s*$")
_SEGMENT_SPACED = re.compile(r"^\s*(.+?)\s+(\S+)\s*$")  # 2019 form: `learning rate 1.875E-05`
_VALIDATION = re.compile(r"\b(\w+) loss at iteration\s+(\d+)([^|]*)\|(.*)$")
_MEMORY = re.compile(
    r"(?:\[Rank (\d+)\]\s*)?[^|\[]*?memory \(MB\)\s*\|\s*allocated:\s*([^\s|[]+)"
    r"(?:\s*\|\s*max allocated:\s*([^\s|[]+))?"
    r"(?:\s*\|\s*(?:reserved|cached):\s*([^\s|[]+))?"
    r"(?:\s*\|\s*max (?:reserved|cached):\s*([^\s|[]+))?"
)
_MEMORY_KEYS = ("allocated", "max allocated", "reserved", "max reserved")
_EFFECTIVE_TFLOPS = re.compile(r"Effective Tera Flops per GPU:\s*(\S+)")

# normalized key (lower case, letters and digits only) -> (field, factor)
_FIELDS = {
    "consumedsamples": ("consumed_samples", 1.0),
    "consumedtokens": ("consumed_tokens", 1.0),
    "elapsedtimeperiterationms": ("ms_per_iter", 1.0),
    "elapsedtimeperiterations": ("ms_per_iter", 1000.0),
    "throughputpergputflopsgpu": ("tflops_per_gpu", 1.0),
    "tflops": ("tflops_per_gpu", 1.0),
    "learningrate": ("learning_rate", 1.0),
    "globalbatchsize": ("global_batch_size", 1.0),
    "lossscale": ("loss_scale", 1.0),
    "gradnorm": ("grad_norm", 1.0),
    "numberofskippediterations": ("skipped_iterations", 1.0),
    "numberofnaniterations": ("nan_iterations", 1.0),
    "samplespersecond": ("samples_per_s", 1.0),
    "tokenspergpupersecondtgs": ("tokens_per_s_per_gpu", 1.0),
    "actualseqlen": ("seq_length", 1.0),
}
MEASURED = frozenset(
    (
        "consumed_samples",
        "consumed_tokens",
        "ms_per_iter",
        "tflops_per_gpu",
        "global_batch_size",
        "skipped_iterations",
        "nan_iterations",
        "samples_per_s",
        "tokens_per_s_per_gpu",
        "seq_length",
    )
)
"""Fields that measure or count something: a value that is not a number >= 0 is malformed."""
MAIN_LOSS_KEYS = ("lmloss", "loss")


def normalize_key(key: str) -> str:
    """`tokens per gpu per second (tgs)` and `tokens_per_gpu_per_second_tgs` -> one key."""
    return re.sub(r"[^a-z0-9]", "", key.lower())


def parse_number(text: str) -> float | None:
    """A float from a log value (`1.5E+01`, `nan`, `4.2GB`); None when it is not one."""
    text = text.strip().rstrip(",").removesuffix("GB")
    try:
        return float(text)
    except ValueError:
        return None


def measurement(key: str, text: str, problems: list[str]) -> float | None:
    """A measured time, rate, size or count: a finite number >= 0; else None, and why in `problems`
    (a corrupted line, never a real measurement)."""
    value = parse_number(text)
    if value is None or not math.isfinite(value) or value < 0:
        problems.append(f"`{key}`: {text.strip()!r} is not a number >= 0 (value skipped)")
        return None
    return value


@dataclass
class IterationRecord:
    """One iteration line: named fields, every loss the line printed, and whether it was cut."""

    iteration: int
    train_iters: int
    values: dict[str, float] = field(default_factory=dict)
    losses: dict[str, float] = field(default_factory=dict)
    timestamp: str | None = None
    complete: bool = True
    problems: list[str] = field(default_factory=list)
    """Measured fields whose value was malformed, and left out."""

    @property
    def loss(self) -> float | None:
        """The language-model loss (`lm loss`, `lm-loss` or `loss`), None when not printed."""
        for key in MAIN_LOSS_KEYS:
            for name, value in self.losses.items():
                if normalize_key(name) == key:
                    return value
        return None


def find_iteration(text: str) -> re.Match[str] | None:
    """The `iteration N/M |` start of an iteration line in `text`, if there is one."""
    if "iteration" not in text:
        return None
    return ITERATION.search(text)


MAX_ITERATION_DIGITS = 18
"""An iteration number or count longer than this (beyond 64 bits) is no iteration a run reached."""


def iteration_problem(match: re.Match[str]) -> str | None:
    """Why the `iteration N/M` of `match` cannot be read (a number beyond 64 bits), or None."""
    longest = max(len(match.group(1)), len(match.group(2)))
    if longest > MAX_ITERATION_DIGITS:
        return f"an iteration line's number of {longest} digits (left out)"
    return None


def parse_iteration(text: str, match: re.Match[str]) -> IterationRecord:
    """Parse the segments after `iteration N/M |`; a last segment without `|` is dropped."""
    record = IterationRecord(int(match.group(1)), int(match.group(2)))
    stamp = re.search(r"\[(\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d)", text[: match.start() + 1])
    record.timestamp = stamp.group(1) if stamp else None
    rest = text[match.end() :]
    segments = rest.split("|")
    record.complete = rest.rstrip().endswith("|")
    if not record.complete:
        segments = segments[:-1]
    for segment in segments:
        add_segment(record, segment)
    return record


def add_segment(record: IterationRecord, segment: str) -> None:
    """Add one `key: value` (or `key=value`, or 2019 `key value`) segment to `record`."""
    match = _SEGMENT_KV.match(segment) or _SEGMENT_SPACED.match(segment)
    if not match:
        return
    key, raw = match.group(1), match.group(2)
    norm = normalize_key(key)
    if norm in _FIELDS and _FIELDS[norm][0] in MEASURED:
        name, factor = _FIELDS[norm]
        measured = measurement(key.strip(), raw, record.problems)
        if measured is not None:
            record.values[name] = measured * factor
        return
    value = parse_number(raw)
    if value is None:
        return
    if norm in _FIELDS:
        name, factor = _FIELDS[norm]
        record.values[name] = value * factor
    elif norm.endswith("loss") and math.isfinite(value):
        record.losses[key.strip()] = value


def is_continuation(text: str) -> bool:
    """Whether `text` looks like the wrapped rest of an unterminated iteration line."""
    stripped = text.strip()
    return "|" in stripped and not stripped.startswith(("[", "time (ms)")) and not find_iteration(text)


@dataclass(frozen=True)
class Validation:
    """A validation (or other named evaluation) loss and perplexity at an iteration."""

    iteration: int
    loss: float | None
    ppl: float | None
    label: str


def parse_validation(text: str) -> Validation | None:
    """`validation loss at iteration 10 | lm loss value: ... | lm loss PPL: ... |`, and Megatron-LM's
    2019 form `validation loss at iteration 1000 | LM loss: ... | LM PPL: ...`."""
    if "loss at iteration" not in text:
        return None
    match = _VALIDATION.search(text)
    if not match:
        return None
    loss = ppl = None
    for segment in match.group(4).split("|"):
        kv = _SEGMENT_KV.match(segment)
        if not kv:
            continue
        key = normalize_key(kv.group(1))
        if key in ("lmlossvalue", "lossvalue", "lmloss"):
            loss = parse_number(kv.group(2))
        elif key in ("lmlossppl", "lossppl", "lmppl"):
            ppl = parse_number(kv.group(2))
    if loss is None and ppl is None:
        return None
    label = f"{match.group(1)}{match.group(3).rstrip()}"
    return Validation(int(match.group(2)), loss, ppl, label)


@dataclass(frozen=True)
class MemoryReport:
    """Megatron's `report_memory`: MB values of one rank (rank None in the oldest form); a value
    not printed, or malformed, is None."""

    rank: int | None
    allocated_MB: float | None
    max_allocated_MB: float | None
    reserved_MB: float | None
    max_reserved_MB: float | None


def parse_memory_reports(text: str, problems: list[str] | None = None) -> list[MemoryReport]:
    """Every memory report on the line (ranks' reports can run together on one line); malformed
    values are None, with why in `problems`."""
    if "memory (MB)" not in text:
        return []
    problems = [] if problems is None else problems
    reports = []
    for match in _MEMORY.finditer(text):
        rank, *numbers = match.groups()
        values = [
            measurement(f"{key} (MB)", n, problems) if n else None
            for key, n in zip(_MEMORY_KEYS, numbers, strict=True)
        ]
        reports.append(MemoryReport(int(rank) if rank else None, *values))
    return reports


def parse_effective_tflops(text: str, problems: list[str]) -> float | None:
    """`Effective Tera Flops per GPU: 41.31 and total parameters 52.005 B` (DeepSpeedExamples 2021)."""
    if "Effective Tera Flops" not in text:
        return None
    match = _EFFECTIVE_TFLOPS.search(text)
    return measurement("Effective Tera Flops per GPU", match.group(1), problems) if match else None
