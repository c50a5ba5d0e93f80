"""A process killed by a signal: in words (`killed by SIGSEGV (signal 11)`), and a rank's death
as the launchers report it, read from log lines by the one reader that `zerolab launch`
(status.json) and `zerolab summarize` (the cause column) share.

torchrun ends a failed run with a ChildFailedError report that names, under "Root Cause", the
first rank to fail, its `host`, its `exitcode` (minus the signal number) and `Signal 11 (SIGSEGV)
received by PID ...` (a run over several nodes has one report per node's torchrun); the
DeepSpeed launcher logs `... exits with return code = -11` without saying which rank; Python's
subprocess says `died with <Signals.SIGSEGV: 11>`.
Standard library only: the engine's build steps use it too.
"""

from __future__ import annotations

import re
import signal
from collections import deque
from dataclasses import dataclass

LAST_LINES = 5
"""How many output lines before the launcher's report are kept with a rank's death."""

_LIKELY = {signal.SIGKILL: "likely out of host memory (the OOM killer) or a scheduler's limit"}
"""What a signal nobody asked for most often means (SIGKILL: the kernel's OOM killer, or a scheduler)."""

_REPORT = re.compile(
    r"failed \(exitcode: -?\d+\)|ChildFailedError|Root Cause \(first observed failure\)"
    r"|^\s*(?:rank|exitcode|host)\s+: |exits with return code = |Killing subprocess|died with <Signals\."
)
"""Every line of a launcher's failure report matches; the first one ends the ranks' output."""
REPORT_MARKERS = (
    "exitcode",
    "host      : ",
    "ChildFailedError",
    "Root Cause",
    "local_rank",
    "exits with return code",
    "Killing subprocess",
    "died with <Signals",
)
"""Every line of a launcher's failure report holds one of these: other lines matter only as the
output before the report (a reader that keeps no last lines may be fed report lines alone)."""
_REPORT_GATE = re.compile("|".join(re.escape(marker) for marker in REPORT_MARKERS))
_TORCHRUN_ROOT = "Root Cause (first observed failure)"
_TORCHRUN_HOST = re.compile(r"^\s*host\s+: (\S+)")
_TORCHRUN_RANK = re.compile(r"^\s*rank\s+: (\d+) \(local_rank: \d+\)")
_TORCHRUN_EXIT = re.compile(r"^\s*exitcode\s+: (-?\d+) \(pid: \d+\)")
_TORCHRUN_FAILED = re.compile(r"failed \(exitcode: (-\d+)\) local_rank: \d+ \(pid: \d+\)")
_DEEPSPEED_EXIT = re.compile(r"exits with return code = (-\d+)")
_SUBPROCESS_DIED = re.compile(r"died with <Signals\.\w+: (\d+)>")
_LAUNCHER_LOG = re.compile(r"^[IWEF]\d{4} [\d:.]+\s+\d+ \S+\.py:\d+\]|\[(?:launch|runner)\.py:\d+:")
"""torchrun's own log lines (glog style) and the DeepSpeed launcher's: not a rank's output."""
_RANK_DIGITS = re.compile(r"(\d+)$")
_TRACEBACK = "Traceback (most recent call last):"
_LOST_PEER = re.compile(
    r"ConnectionResetError|BrokenPipeError|Connection reset by peer|Connection closed by peer"
)
"""A traceback ending in one of these is a process that lost its connection to the one that died (a
peer rank, a rank's data loader workers): what followed the death, not what came before it."""


def signal_words(number: int) -> str:
    """`SIGSEGV (signal 11)`; `signal 99` for a number without a name."""
    try:
        return f"{signal.Signals(number).name} (signal {number})"
    except ValueError:
        return f"signal {number}"


def killed_by(number: int) -> str:
    """`killed by SIGKILL (signal 9): likely out of host memory (the OOM killer) or a scheduler's limit`."""
    hint = _LIKELY.get(number)
    return f"killed by {signal_words(number)}" + (f": {hint}" if hint else "")


def signal_of_exit(code: int) -> int | None:
    """The signal an exit code says killed the process: minus its number (Python's subprocess), or
    128 plus it (a shell, srun); None for a code that says no signal."""
    number = -code if code < 0 else code - 128 if code > 128 else None
    return number if number in set(signal.Signals) else None


def exit_code_words(code: int) -> str:
    """`exit code 1`; where the code says a signal, which: `exit code 137: killed by SIGKILL ...`."""
    number = signal_of_exit(code)
    return f"exit code {code}" + (f": {killed_by(number)}" if number is not None else "")


@dataclass(frozen=True)
class RankSignal:
    """A rank killed by a signal: its global rank and host (None when the launcher does not say),
    the signal, the log line that says so, and that rank's (or else the log's) last output lines,
    less the tracebacks of the processes that lost their connection to it."""

    rank: int | None
    signal: int
    line: int
    last_lines: tuple[str, ...]
    host: str | None = None

    def describe(self) -> str:
        """`rank 0 killed by SIGSEGV (signal 11)`; `rank 1 on node2 killed by ...` when the launcher
        names a host other than localhost (torchrun)."""
        who = "a rank" if self.rank is None else f"rank {self.rank}"
        where = f" on {self.host}" if self.host and self.host != "localhost" else ""
        return f"{who}{where} {killed_by(self.signal)}"


@dataclass(frozen=True)
class _Death:
    """A launcher's report of one rank's end: rank, exit code (minus a signal), line, host."""

    rank: int | None
    code: int
    line: int
    host: str | None


class RankSignalReader:
    """Feed it every line in order (`source`: the line's rank prefix, e.g. `rank1`, or None);
    `found` is the rank the launcher reports killed by a signal, or None. `keep_last_lines`:
    whether `found` carries the output lines before the report (summaries do not need them)."""

    def __init__(self, *, keep_last_lines: bool = True) -> None:
        self._keep = keep_last_lines
        self._recent: dict[str | None, deque[str]] = {}
        self._tracebacks: dict[str | None, list[str]] = {}  # a traceback being read, per source
        self._before: dict[str | None, list[str]] | None = None
        self._in_root = False
        self._block_rank: int | None = None
        self._block_host: str | None = None
        self._root: _Death | None = None  # torchrun's first root cause
        self._root_signal: _Death | None = None  # the first root cause killed by a signal (one per node)
        self._other: _Death | None = None  # a signal said elsewhere

    def feed(self, number: int, source: str | None, text: str) -> None:
        """Look at one line."""
        if not _REPORT_GATE.search(text) or not _REPORT.search(text):
            if self._keep and self._before is None and text and not text.isspace():
                self._keep_line(source, text)
            return
        if self._before is None:
            for key, lines in self._tracebacks.items():  # not ended before the report: kept
                self._recent_of(key).extend(lines)
            self._before = {key: list(lines) for key, lines in self._recent.items()}
        if _TORCHRUN_ROOT in text:
            self._in_root = True
        elif match := _TORCHRUN_HOST.match(text):
            self._block_host = match[1]
        elif match := _TORCHRUN_RANK.match(text):
            self._block_rank = int(match[1])
        elif match := _TORCHRUN_EXIT.match(text):
            if self._in_root:
                death = _Death(self._block_rank, int(match[1]), number, self._block_host)
                self._root = self._root or death
                if death.code < 0 and self._root_signal is None:
                    self._root_signal = death
        elif self._other is None:
            for pattern, sign in ((_TORCHRUN_FAILED, 1), (_DEEPSPEED_EXIT, 1), (_SUBPROCESS_DIED, -1)):
                if match := pattern.search(text):  # as an exit code: minus the signal number
                    self._other = _Death(None, sign * int(match[1]), number, None)
                    break

    def _keep_line(self, source: str | None, text: str) -> None:
        """Keep an output line as one of the last lines of `source`; a traceback is kept once its
        exception line (back at the traceback's indent) ends it, unless it is a lost peer's."""
        block = self._tracebacks.get(source)
        if block is None and text.lstrip() == _TRACEBACK:
            self._tracebacks[source] = [text]
            return
        if block is None:
            self._recent_of(source).append(text)
            return
        block.append(text)
        indent = len(block[0]) - len(block[0].lstrip())
        if len(text) - len(text.lstrip()) <= indent:  # the exception line
            del self._tracebacks[source]
            if not _LOST_PEER.search(text):
                self._recent_of(source).extend(block)

    def _recent_of(self, source: str | None) -> deque[str]:
        recent = self._recent.get(source)
        if recent is None:
            recent = self._recent[source] = deque(maxlen=4 * LAST_LINES)
        return recent

    @property
    def found(self) -> RankSignal | None:
        """The rank killed by a signal: a torchrun root cause killed by one (over several nodes,
        the node whose rank died, not the nodes whose ranks failed after it); None when torchrun's
        root cause exited with an error code instead; else the first death by signal seen."""
        death = self._root_signal or self._root or self._other
        if death is None or death.code >= 0:
            return None
        return RankSignal(death.rank, -death.code, death.line, self._last_lines(death.rank), death.host)

    def _last_lines(self, rank: int | None) -> tuple[str, ...]:
        """The rank's own last lines where its output is prefixed with its rank, else the log's."""
        before = self._before if self._before is not None else self._recent
        own = [
            lines
            for source, lines in before.items()
            if source is not None
            and rank is not None
            and (m := _RANK_DIGITS.search(source))
            and int(m[1]) == rank
        ]
        lines = own[0] if own else before.get(None, [])
        rank_output = [line.rstrip() for line in lines if not _LAUNCHER_LOG.search(line)]
        return tuple(rank_output[-LAST_LINES:])
