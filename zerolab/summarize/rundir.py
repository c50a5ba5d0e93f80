"""What a summary takes from a run directory: run.json (config facts) and status.json (how it
ended), read through zerolab.rundir, samples.csv (host memory) and doctor.json (devices)."""

from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from zerolab import rundir
from zerolab.summarize.flops import peak_tflops


@dataclass
class RunDirFacts:
    """What the run directory says; `problems` lists files that could not be read."""

    run: dict[str, Any] = field(default_factory=dict)
    status: dict[str, Any] = field(default_factory=dict)
    peak_host_rss_MiB: float | None = None
    device_name: str | None = None
    device_peak_tflops: float | None = None
    problems: list[str] = field(default_factory=list)


def peak_rss_MiB(path: Path, problems: list[str]) -> float | None:
    """The largest `process_tree_rss_MiB` in samples.csv, streamed row by row."""
    peak = None
    try:
        with open(path, newline="", encoding="utf-8", errors="replace") as handle:
            for row in csv.DictReader(handle):
                try:
                    value = float(row.get("process_tree_rss_MiB") or "nan")
                except ValueError:
                    continue
                if math.isfinite(value):
                    peak = value if peak is None else max(peak, value)
    except (OSError, csv.Error) as error:
        problems.append(f"{path.name}: {error}")
    return peak


def _device_names(value: Any) -> list[str]:
    """Every string under a `doctor.json` value, depth first (device names are among them)."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for item in value.values() for s in _device_names(item)]
    if isinstance(value, list):
        return [s for item in value for s in _device_names(item)]
    return []


def _read_doctor(path: Path, problems: list[str]) -> Any:
    """doctor.json as it was written (any JSON), or None when absent or unreadable."""
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8", errors="replace"))
    except (OSError, ValueError) as error:
        problems.append(f"{path.name}: not readable JSON ({error})")
        return None


def read_run_dir(directory: Path) -> RunDirFacts:
    """The facts of one run directory; missing files leave their fields empty."""
    facts = RunDirFacts()
    run, problems = rundir.read_facts(directory)
    facts.run = run.model_dump(exclude_none=True) if run else {}
    status, status_problems = rundir.read_status(directory)
    facts.status = status.model_dump() if status else {}
    facts.problems = problems + status_problems
    samples = directory / rundir.SAMPLES_FILE
    if samples.is_file():
        facts.peak_host_rss_MiB = peak_rss_MiB(samples, facts.problems)
    doctor = _read_doctor(directory / rundir.DOCTOR_FILE, facts.problems)
    for name in _device_names(doctor):
        peak = peak_tflops(name)
        if peak is not None:
            facts.device_name, facts.device_peak_tflops = name, peak
            break
    return facts
