"""How a run ended, from its log: failure signatures (FORMATS.md section 10, and the
CPU engine's own), a rank killed by a signal (zerolab.logs.signals), the first error a rank raised,
completion markers, and NaN/overflow anomalies that do not stop a run. The one reader of a
run's cause: `zerolab launch` (status.json) and `zerolab summarize` (the cause column) both
use it."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from zerolab.logs.lines import read_lines
from zerolab.logs.signals import REPORT_MARKERS, RankSignalReader

CAUSE_LABELS = {
    "out_of_memory": "out of memory",
    "nan_or_overflow": "NaN or overflow",
    "nccl_timeout": "NCCL timeout",
    "gpu_error": "GPU error",
    "signal": "killed by a signal",
    "killed": "killed",
    "exception": "exception",
}
"""Failure kinds, most specific first: when a log shows several, the first one here wins.
Within a kind, the signature listed first in _SIGNATURES wins."""

SELF_DESCRIBED = ("signal",)
"""Kinds whose detail says it all (`rank 0 killed by SIGSEGV (signal 11)`): no label before it."""


def cause_text(kind: str, detail: str | None) -> str:
    """The cause column: `out of memory: CUDA out of memory. ...`, `rank 0 killed by SIGSEGV (signal 11)`."""
    if not detail:
        return CAUSE_LABELS[kind]
    return detail if kind in SELF_DESCRIBED else f"{CAUSE_LABELS[kind]}: {detail}"


# (kind, cheap substring, pattern): the substring gates the regex on the hot path
_SIGNATURES: tuple[tuple[str, str, re.Pattern[str]], ...] = (
    ("out_of_memory", "out of memory", re.compile(r"CUDA out of memory\.?(.{0,60})")),
    ("out_of_memory", "OutOfMemoryError", re.compile(r"OutOfMemoryError(.{0,60})")),
    ("out_of_memory", "oom_kill", re.compile(r"Detected \d+ oom_kill event")),
    ("out_of_memory", "Out Of Memory", re.compile(r"task \d+: Out Of Memory")),
    ("out_of_memory", "Killed process", re.compile(r"Out of memory: Killed process \d+")),
    ("out_of_memory", "can't allocate memory", re.compile(r"DefaultCPUAllocator: can't allocate memory.*")),
    ("nan_or_overflow", "NaN", re.compile(r"found NaN in .*")),
    (
        "nan_or_overflow",
        "loss scale already at minimum",
        re.compile(r"Current loss scale already at minimum.*"),
    ),
    ("nccl_timeout", "timeout", re.compile(r"Watchdog caught collective operation timeout.*")),
    ("nccl_timeout", "Timed out", re.compile(r"\[.*gloo.*\] Timed out .*")),
    ("gpu_error", "CUDA error", re.compile(r"CUDA error: .*")),
    ("gpu_error", "ECC", re.compile(r"cudaErrorECCUncorrectable.*")),
    ("gpu_error", "CUDAError", re.compile(r"c10::CUDAError")),
    (
        "killed",
        "CANCELLED",
        re.compile(r"\*\*\* (?:STEP|JOB) \S+ ON \S+ CANCELLED AT \S+(?: DUE TO TIME LIMIT)?"),
    ),
    ("killed", "SIGTERM", re.compile(r"received SIGTERM.*|Signals\.SIGTERM")),
    ("killed", "SIGKILL", re.compile(r"Signals\.SIGKILL|SIGKILL")),
    ("killed", "Killing subprocess", re.compile(r"Killing subprocess \d+")),
)
_ERROR_LINE = re.compile(r"^\s*(?:[\w.]+\.)?(\w*(?:Error|Exception))(?::\s*(.*))?$")
_COMPLETION = ("[after training is done]", "exits successfully", "{'train_runtime'")
_NAN_WARNINGS = ("Bad grad_norm", "grad_norm=nan")
_HANDLED = "During handling of the above exception, another exception occurred"
_WORTH_A_LOOK = re.compile(
    "|".join(
        re.escape(text)
        for text in (
            *(gate for _, gate, _ in _SIGNATURES),
            *_COMPLETION,
            *_NAN_WARNINGS,
            *REPORT_MARKERS,
            "Traceback",
            _HANDLED,
            "Error",
            "Exception",
        )
    )
)
"""One search per line: lines with none of these texts cannot change the outcome."""


def read_ending(path: Path) -> EndingDetector:
    """How the run whose log is at `path` ended, with the last lines a killed rank printed."""
    detector = EndingDetector(keep_last_lines=True)
    for line in read_lines(path):
        detector.feed(line.number, line.text, line.source, line.host)
    return detector


@dataclass(frozen=True)
class Failure:
    """A failure signature: its kind (a CAUSE_LABELS key), the line number and what it said."""

    kind: str
    line: int
    detail: str

    @property
    def label(self) -> str:
        """e.g. `out of memory: CUDA out of memory. Tried to allocate 8.01 GiB`."""
        return cause_text(self.kind, self.detail)


class EndingDetector:
    """Feed it every line; `failure`, `completed` and `nan_warnings` say how the run ended."""

    def __init__(self, *, keep_last_lines: bool = False) -> None:
        self.found: dict[str, Failure] = {}
        self._rank: dict[str, int] = {}  # index in _SIGNATURES of the signature behind found[kind]
        self.completed = False
        self._after_traceback = False
        self._handled: str | None = None  # the source whose recorded exception was then handled
        self._exception_source: str | None = None
        self._open_traceback: Failure | None = None  # a traceback with only frames after it so far
        self._traceback_hosts: dict[str, None] = {}  # the hosts whose output holds a traceback, in order
        self.nan_warnings = 0
        self._every_line = keep_last_lines
        self.signals = RankSignalReader(keep_last_lines=keep_last_lines)

    def feed(self, number: int, text: str, source: str | None = None, host: str | None = None) -> None:
        """Look at one line (`source`: its rank or host prefix, if any; `host`: the host it names)."""
        if self._open_traceback is not None and not text.startswith((" ", "\t")):
            self._open_traceback = None  # its exception line, or another line: not a log cut inside it
        if self._every_line:  # the lines before a killed rank's report are kept
            self.signals.feed(number, source, text)
        if not _WORTH_A_LOOK.search(text):
            return
        if not self._every_line:
            self.signals.feed(number, source, text)
        if any(marker in text for marker in _COMPLETION):
            self.completed = True
        if _HANDLED in text and "exception" in self.found and source == self._exception_source:
            self._handled = source  # the exception was caught, and raising another one failed the run
        elif "Traceback (most recent call last)" in text:
            self._after_traceback = True
            if host is not None:
                self._traceback_hosts[host] = None
            self._open_traceback = Failure("exception", number, "the log ends inside a traceback")
        elif self._after_traceback and ("Error" in text or "Exception" in text):
            self._exception(number, text, source)
        if any(warning in text for warning in _NAN_WARNINGS):
            self.nan_warnings += 1
        for rank, (kind, gate, pattern) in enumerate(_SIGNATURES):
            if gate in text and self._rank.get(kind, len(_SIGNATURES)) > rank:
                match = pattern.search(text)
                if match:
                    self.found[kind] = Failure(kind, number, match.group(0).strip()[:200])
                    self._rank[kind] = rank

    def _exception(self, number: int, text: str, source: str | None) -> None:
        """The first error a rank raised, or, when that one was handled, the one its handling raised."""
        replaces = self._handled is not None and source == self._handled
        if "exception" in self.found and not replaces:
            return
        match = _ERROR_LINE.match(text)
        if match and match.group(1) != "ChildFailedError":
            detail = f"{match.group(1)}: {match.group(2) or ''}".strip().rstrip(":")
            self.found["exception"] = Failure("exception", number, detail[:200])
            self._exception_source, self._handled = source, None

    @property
    def failure(self) -> Failure | None:
        """The most specific failure seen, or None; an exception of a log whose lines name their
        hosts (pdsh) names the hosts with a traceback: `... (tracebacks on node1, node2)`."""
        for kind in CAUSE_LABELS:
            if kind == "signal" and (rank_signal := self.signals.found):
                return Failure(kind, rank_signal.line, rank_signal.describe())
            if kind in self.found:
                return self._with_hosts(self.found[kind])
        return self._with_hosts(self._open_traceback)

    def _with_hosts(self, failure: Failure | None) -> Failure | None:
        if failure is None or failure.kind != "exception" or not self._traceback_hosts:
            return failure
        hosts = ", ".join(self._traceback_hosts)
        many = "s" if len(self._traceback_hosts) > 1 else ""
        return Failure(failure.kind, failure.line, f"{failure.detail} (traceback{many} on {hosts})")
