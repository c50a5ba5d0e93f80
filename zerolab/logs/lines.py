"""Reading a log as clean physical lines: streamed, ANSI-free, split on carriage
returns, with the launcher's rank or host prefix taken off and kept as the source."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

MAX_LINE_BYTES = 64 * 1024
"""Longer physical lines are cut: only their first MAX_LINE_BYTES are parsed."""

_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b[@-Z\\-_]|\^\[\[[0-?]*[ -/]*[@-~]|\^\[[@-Z\\-_a-z]")
_ROLE_PREFIX = re.compile(r"^\[([A-Za-z_]*\d+)\]:")  # torchrun --tee `[default7]:`, torch>=2.2 `[rank2]:`
_LABEL_PREFIX = re.compile(r"^(\d{1,6}): ")  # srun --label `3: `
_HOST_PREFIX = re.compile(
    r"^([A-Za-z][\w.-]*?\d+|(?:\d{1,3}\.){3}\d{1,3}): "
)  # pdsh `node3: `, `10.0.1.101: `
"""pdsh (the deepspeed launcher over ssh) `node2: `, k8s `actor-multi-node-worker-0: `: a host name
ending in digits (a word such as `Error: ` is not taken for one)."""


@dataclass(frozen=True)
class Line:
    """One cleaned line: `source` is the rank/host prefix (None without one)."""

    number: int
    source: str | None
    text: str
    cut: bool = False
    unterminated: bool = False
    """The file ends inside this line (no newline after it)."""
    host: str | None = None
    """The host whose output it is, where the prefix names one (pdsh's `node2: `, `10.0.1.101: `)."""


def read_lines(path: Path) -> Iterator[Line]:
    """Yield the cleaned lines of `path`, reading it in bounded pieces (constant memory)."""
    with open(path, "rb") as handle:
        number = 0
        skipping = False
        while True:
            raw = handle.readline(MAX_LINE_BYTES)
            if not raw:
                return
            complete = raw.endswith(b"\n")
            if skipping:
                skipping = not complete
                continue
            number += 1
            cut = not complete and len(raw) >= MAX_LINE_BYTES
            skipping = cut
            text = raw.decode("utf-8", errors="replace")
            last = not complete and not cut  # the file ends inside this line
            for segment in text.rstrip("\r\n").split("\r"):
                yield clean_line(number, segment, cut, last)


def clean_line(number: int, text: str, cut: bool = False, unterminated: bool = False) -> Line:
    """Strip ANSI codes, a markdown blockquote `> ` and one launcher prefix from `text`."""
    if "\x1b" in text or "^[" in text:
        text = _ANSI.sub("", text)
    text = text.replace("\x00", "")
    if text.startswith(">") and text[1:2] in ("", " "):  # a log pasted as a markdown blockquote
        text = text[2:]
    source = host = None
    for pattern in (_ROLE_PREFIX, _LABEL_PREFIX, _HOST_PREFIX):
        match = pattern.match(text)
        if match:
            source = match.group(1)
            host = source if pattern is _HOST_PREFIX else None
            text = text[match.end() :]
            break
    return Line(number, source, text, cut, unterminated, host)
