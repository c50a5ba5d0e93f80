"""What a summary takes from a run directory: run.json (config facts), status.json (how it
ended) and eval.json (`zerolab eval`'s scores), read through zerolab.rundir, a fine-tuning's
finetune.jsonl (zerolab.finetune.records), samples.csv (host
memory) and doctor.json (devices)."""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from zerolab import rundir
from zerolab.finetune.records import scan_records
from zerolab.logs.megatron import measurement
from zerolab.summarize.flops import peak_tflops

RSS_KEY = "process_tree_rss_MiB"
MAX_SAMPLE_PROBLEMS = 3


@dataclass
class RunDirFacts:
    """What the run directory says, typed as zerolab.rundir reads it (None: the file is absent or
    unreadable); `problems` lists files that could not be read."""

    run: rundir.RunFacts | None = None
    status: rundir.Status | None = None
    peak_host_rss_MiB: float | None = None
    device_name: str | None = None
    device_peak_tflops: float | None = None
    evaluation: dict[str, rundir.TaskScore] = field(default_factory=dict)
    """eval.json's scores by task (`zerolab eval`)."""
    finetune: list[dict[str, Any]] = field(default_factory=list)
    """A fine-tuning run's records (finetune.jsonl), in order."""
    problems: list[str] = field(default_factory=list)


def peak_rss_MiB(path: Path, problems: list[str]) -> float | None:
    """The largest `process_tree_rss_MiB` in samples.csv, streamed row by row; an empty cell is a
    sample without it, a malformed one is skipped and named in `problems` (the first few)."""
    peak, bad = None, 0
    try:
        with open(path, newline="", encoding="utf-8", errors="replace") as handle:
            reader = csv.DictReader(handle)
            for row in reader:
                text = row.get(RSS_KEY)
                if not isinstance(text, str) or not text.strip():
                    continue
                found: list[str] = []
                value = measurement(RSS_KEY, text, found)
                if value is None:
                    bad += 1
                    if bad <= MAX_SAMPLE_PROBLEMS:
                        problems += [f"{path.name}:{reader.line_num}: {problem}" for problem in found]
                    continue
                peak = value if peak is None else max(peak, value)
    except (OSError, csv.Error) as error:
        problems.append(f"{path.name}: {error}")
    if bad > MAX_SAMPLE_PROBLEMS:
        problems.append(f"{path.name}: {bad - MAX_SAMPLE_PROBLEMS} more malformed values skipped")
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
    facts.run, problems = rundir.read_facts(directory)
    facts.status, status_problems = rundir.read_status(directory)
    facts.problems = problems + status_problems
    evaluation, eval_problems = rundir.read_eval(directory)
    facts.evaluation = evaluation.tasks if evaluation else {}
    facts.problems += eval_problems
    facts.finetune = scan_records(directory, facts.problems)
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
