"""The one exception type for bad user input, and how a decoder's complaint reads in one."""

from __future__ import annotations

import json


class UserError(Exception):
    """Bad input the user can fix: the message names the key, file or line and the fix.

    The `zerolab` command prints it and exits with status 2.
    """


class Interrupted(KeyboardInterrupt):
    """Ctrl-C, with what it left behind: the message says what was kept (a rerun resumes from it)
    or removed. The `zerolab` command prints `zerolab: interrupted; MESSAGE` and exits with 130."""


def interrupted_line(stop: KeyboardInterrupt) -> str:
    """The one line a command stopped by Ctrl-C ends with: what an Interrupted says it left, or only
    that it was interrupted."""
    said = str(stop) if isinstance(stop, Interrupted) else ""
    return f"zerolab: interrupted; {said}" if said else "zerolab: interrupted (Ctrl-C)"


def headline(message: str) -> str:
    """A UserError's message in one line: its problems (the lines that start with `- `, a list of
    problems' first lines), else its first line."""
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    problems = [line[2:] for line in lines if line.startswith("- ")]
    return "; ".join(problems) if problems else (lines[0] if lines else "")


def json_error_text(error: json.JSONDecodeError, *, with_line: bool = False) -> str:
    """A JSON decoding error as one phrase, e.g. `Unterminated string starting at column 10`
    (some of json's messages end in "at", before the position it appends itself)."""
    where = f"line {error.lineno}, column {error.colno}" if with_line else f"column {error.colno}"
    return f"{error.msg.removesuffix(' at')} at {where}"
