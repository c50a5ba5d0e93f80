"""status.json: `state` (running, completed, failed, killed), `exit_code`, `started`,
`ended` (ISO 8601, UTC), `cause` (one line, when failed or killed) and `last_lines` (the
output before a rank was killed by a signal), and how a failed run's cause is found."""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import datetime, timezone
from pathlib import Path

from zerolab.launch.rundir import STATUS_FILE, write_json
from zerolab.signals import RankSignal, RankSignalReader
from zerolab.summarize.lines import clean_line

RUNNING, COMPLETED, FAILED, KILLED = "running", "completed", "failed", "killed"

_EXCEPTION_LINE = re.compile(
    r"^(?:\[(?:default)?rank\d+\]:\s*)?(?P<line>(?:[A-Za-z_][\w.]*\.)?[A-Z]\w*(?:Error|Exception|Exit)\b(?::.*)?)$"
)
_WRAPPER_EXCEPTIONS = ("ChildFailedError", "SignalException")


def now_iso() -> str:
    """The current time, UTC, ISO 8601 to the second."""
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def write_status(
    run_dir: Path,
    state: str,
    *,
    started: str,
    exit_code: int | None = None,
    ended: str | None = None,
    cause: str | None = None,
    last_lines: list[str] | None = None,
) -> dict:
    """Write status.json whole and return what was written."""
    status = {
        "state": state,
        "exit_code": exit_code,
        "started": started,
        "ended": ended,
        "cause": cause,
        "last_lines": last_lines or [],
    }
    write_json(run_dir / STATUS_FILE, status)
    return status


def failure_cause(log_lines: Iterable[str]) -> str | None:
    """The first exception a rank printed in `log_lines` (the root cause comes before the
    launcher's own summary and the other ranks' follow-on errors), or None."""
    for raw in log_lines:
        match = _EXCEPTION_LINE.match(raw.strip())
        if match and not any(wrapper in match["line"] for wrapper in _WRAPPER_EXCEPTIONS):
            return match["line"][:500]
    return None


def rank_signal(log_lines: Iterable[str]) -> RankSignal | None:
    """The rank the launcher reports killed by a signal in `log_lines`, read as `zerolab
    summarize` reads a log (zerolab.signals), or None."""
    reader = RankSignalReader()
    for number, raw in enumerate(log_lines, start=1):
        line = clean_line(number, raw.rstrip("\r\n"))
        reader.feed(line.number, line.source, line.text)
    return reader.found
