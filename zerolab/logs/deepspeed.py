"""Parsers for DeepSpeed's own lines: the ThroughputTimer (all four generations,
FORMATS.md section 6), `see_memory_usage`, the engine's `step=` progress line,
fp16 overflow messages, and HF Trainer's metric dicts printed beside them."""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

from zerolab.logs.megatron import measurement

_TIMER_STEP = re.compile(r"(?:epoch=(\d+)/micro_step=(\d+)/global_step=(\d+)|\b(\d+)/(\d+)),\s*(.*)$")
_SEE_MEMORY = re.compile(r"\bMA (\S+) GB\s+Max_MA (\S+) GB\s+CA (\S+) GB\s+Max_CA (\S+) GB")
_CPU_MEMORY = re.compile(r"CPU Virtual Memory:\s+used = (\S+) GB, percent = \S+?%")
_TIMER_MEASURED = (
    "SamplesPerSec",
    "CurrSamplesPerSec",
    "RunningAvgSamplesPerSec",
    "MemAllocated",
    "MaxMemAllocated",
)
_PROGRESS = re.compile(r"\bstep=(\d+), skipped=(\d+), lr=")
_OVERFLOW = re.compile(
    r"OVERFLOW!|Overflow detected|Grad overflow on iteration|fp16 dynamic loss scale overflow"
)
_HF_DICT = re.compile(r"\{'(?:loss|eval_loss|train_runtime)'.*\}")


@dataclass(frozen=True)
class ThroughputLine:
    """One ThroughputTimer report; memory fields are None before DeepSpeed v0.6.0."""

    step: int
    samples_per_s: float | None
    mem_allocated_GB: float | None
    max_mem_allocated_GB: float | None


def parse_throughput(text: str, problems: list[str]) -> ThroughputLine | None:
    """`epoch=0/micro_step=5/global_step=5, RunningAvgSamplesPerSec=..., MemAllocated=0.6GB, ...`;
    a malformed rate or memory value is left out, with why in `problems`."""
    if "SamplesPerSec=" not in text:
        return None
    match = _TIMER_STEP.search(text)
    if not match:
        return None
    step = int(match.group(3) or match.group(5))
    fields: dict[str, float] = {}
    for pair in match.group(6).split(","):
        key, _, value = pair.partition("=")
        key = re.sub(r"\s+", "", key)  # `MemA     llocated` -> `MemAllocated`
        if key in _TIMER_MEASURED:
            number = measurement(key, value, problems)
            if number is not None:
                fields[key] = number
    current = fields.get("CurrSamplesPerSec", fields.get("SamplesPerSec"))
    return ThroughputLine(step, current, fields.get("MemAllocated"), fields.get("MaxMemAllocated"))


@dataclass(frozen=True)
class SeeMemory:
    """`see_memory_usage`: accelerator GB (allocated, max allocated, reserved, max reserved); a
    malformed value is None."""

    allocated_GB: float | None
    max_allocated_GB: float | None
    reserved_GB: float | None
    max_reserved_GB: float | None


def parse_see_memory(text: str, problems: list[str]) -> SeeMemory | None:
    """`MA 5.87 GB         Max_MA 6.63 GB         CA 11.91 GB         Max_CA 12 GB`."""
    if "Max_MA" not in text:
        return None
    match = _SEE_MEMORY.search(text)
    if not match:
        return None
    keys = ("MA", "Max_MA", "CA", "Max_CA")
    return SeeMemory(*(measurement(k, v, problems) for k, v in zip(keys, match.groups(), strict=True)))


def parse_cpu_memory(text: str, problems: list[str]) -> float | None:
    """`CPU Virtual Memory:  used = 146.29 GB, percent = 78.1%` -> GB used, system-wide."""
    if "CPU Virtual Memory" not in text:
        return None
    match = _CPU_MEMORY.search(text)
    return measurement("CPU Virtual Memory used", match.group(1), problems) if match else None


def parse_progress(text: str) -> tuple[int, int] | None:
    """The engine's `step=200, skipped=4, lr=[...]` -> (step, skipped steps so far)."""
    if "skipped=" not in text:
        return None
    match = _PROGRESS.search(text)
    return (int(match.group(1)), int(match.group(2))) if match else None


def is_overflow(text: str) -> bool:
    """Whether the line reports an fp16 overflow (a skipped step)."""
    return ("verflow" in text or "OVERFLOW" in text) and bool(_OVERFLOW.search(text))


def parse_hf_dict(text: str) -> dict[str, float] | None:
    """HF Trainer's `{'loss': 2.0491, 'learning_rate': ..., 'epoch': 0.28}` (numbers only)."""
    if "{'" not in text:
        return None
    match = _HF_DICT.search(text)
    if not match or len(match.group(0)) > 2000:
        return None
    try:
        value = ast.literal_eval(match.group(0))
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None
    if not isinstance(value, dict):
        return None
    return {k: float(v) for k, v in value.items() if isinstance(v, int | float) and not isinstance(v, bool)}
