"""The run's configuration as the log states it: Megatron's `arguments` block,
DeepSpeed's `DeepSpeedEngine configuration` dump and its `json = {` user config,
and a few one-line facts (world size, padded vocabulary, samples per epoch).
Used to fill the config columns when no run.json exists, to estimate the memory of a
plain log's run (zerolab.estimate.from_log), and to port a log's launch (`zerolab from-command`:
read_launch keeps each argument as printed)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from zerolab.errors import UserError
from zerolab.logs.lines import read_lines

_ARG_LINE = re.compile(r"^\s{1,4}(\w+) \.{2,} ?(.*?)\s*$")
_DS_LINE = re.compile(r"\[config\.py:\d+:print\]\s+(\w+)\s+\.*\s*(.*?)\s*$")
_WORLD = re.compile(
    r"using world size: (\d+), data-parallel.size: (\d+),.*?tensor-model-parallel size: (\d+), "
    r"pipeline-model-parallel size: (\d+)"
)
_PADDED_VOCAB = re.compile(r"padded vocab \(size: \d+\) with \d+ dummy tokens \(new size: (\d+)\)")
_TOTAL = re.compile(r"^\s*total number of (samples|epochs): (\d+)\s*$")
MAX_JSON_LINES = 400


def convert(value: str) -> Any:
    """`True`/`False`/`None`, ints and floats as Python values; other text unchanged."""
    table = {"True": True, "False": False, "None": None}
    if value in table:
        return table[value]
    for kind in (int, float):
        try:
            return kind(value)
        except ValueError:
            pass
    return value


class ConfigCollector:
    """Feed it lines in order; `args` (every argument of Megatron's dump) and `ds` (every setting
    of DeepSpeed's) hold what the dumps said (first value wins); `printed` holds each argument of
    Megatron's dump as the text it printed (`str` of the value: a list as `['a', 'b']`)."""

    def __init__(self) -> None:
        self.args: dict[str, Any] = {}
        self.printed: dict[str, str] = {}
        self.ds: dict[str, Any] = {}
        self.ds_json: dict[str, Any] = {}
        self.samples_per_epoch: float | None = None
        self._in_args = False
        self._json_lines: list[str] | None = None
        self._pending_samples: int | None = None

    def feed(self, text: str) -> bool:
        """Consume one line; True when it was part of a configuration dump."""
        if self._json_lines is not None:
            return self._feed_json(text)
        if "----- arguments -----" in text or ("------ " in text and "arguments ------" in text):
            self._in_args = "end of" not in text
            return True
        if self._in_args:
            match = _ARG_LINE.match(text)
            if match:
                self.args.setdefault(match.group(1), convert(match.group(2)))
                self.printed.setdefault(match.group(1), match.group(2))
                return True
        if "[config.py:" in text:
            return self._feed_ds(text)
        return self._feed_facts(text)

    @property
    def in_arguments(self) -> bool:
        """Whether the last line fed was inside Megatron's argument dump (its header seen, its end not)."""
        return self._in_args

    def _feed_ds(self, text: str) -> bool:
        if text.rstrip().endswith("json = {"):
            self._json_lines = ["{"]
            return True
        match = _DS_LINE.search(text)
        if match is None:
            return False
        self.ds.setdefault(match.group(1), convert(match.group(2)))
        return True

    def _feed_json(self, text: str) -> bool:
        assert self._json_lines is not None
        self._json_lines.append(text)
        if text.startswith("}") or len(self._json_lines) > MAX_JSON_LINES:
            try:
                parsed = json.loads("\n".join(self._json_lines))
            except ValueError:
                parsed = None
            if isinstance(parsed, dict) and not self.ds_json:
                self.ds_json = parsed
            self._json_lines = None
        return True

    def _feed_facts(self, text: str) -> bool:
        if "using world size" in text:
            match = _WORLD.search(text)
            if match:
                for key, value in zip(
                    ("world_size", "data_parallel_size", "tensor_model_parallel_size"),
                    match.groups()[:3],
                    strict=True,
                ):
                    self.args.setdefault(key, int(value))
                self.args.setdefault("pipeline_model_parallel_size", int(match.group(4)))
                return True
        if "padded vocab" in text:
            match = _PADDED_VOCAB.search(text)
            if match:
                self.args.setdefault("padded_vocab_size", int(match.group(1)))
                return True
        if "total number of" in text and self.samples_per_epoch is None:
            match = _TOTAL.match(text)
            if match and match.group(1) == "samples":
                self._pending_samples = int(match.group(2))
            elif match and self._pending_samples is not None and int(match.group(2)) > 0:
                self.samples_per_epoch = self._pending_samples / int(match.group(2))
            return match is not None
        return False


@dataclass(frozen=True)
class LoggedLaunch:
    """A launch as its log printed it: Megatron's arguments (each as printed, from the first dump)
    and the DeepSpeed config DeepSpeed printed (`json = {`; empty where it printed none)."""

    arguments: dict[str, str]
    ds_config: dict[str, Any]


def read_launch(path: Path) -> LoggedLaunch:
    """The launch `path` (a train.log) printed; UserError naming the file (and the line) for a log
    with no argument dump, or one cut before the dump's end."""
    collector = ConfigCollector()
    started = ended = last = None
    try:
        for line in read_lines(path):
            was_in = collector.in_arguments
            collector.feed(line.text)
            if started is None and collector.in_arguments:
                started = line.number
            if started is not None and ended is None:
                last = line.number
                if was_in and not collector.in_arguments:
                    ended = line.number
            if ended is not None and collector.ds_json:
                break  # the first dump, then DeepSpeed's config: all a launch printed
    except OSError as error:
        raise UserError(f"{path}: cannot read the log: {error.strerror}") from None
    if started is None:
        raise UserError(
            f"{path}: no argument dump (Megatron prints `------------------------ arguments "
            "------------------------` at the start of every launch): give the log of a Megatron launch, "
            "from its first line"
        )
    if ended is None:
        raise UserError(
            f"{path}:{started}: the argument dump that starts here has no `end of arguments` line before "
            f"the log ends (line {last}): the log is cut; give the whole log"
        )
    return LoggedLaunch(dict(collector.printed), dict(collector.ds_json))
