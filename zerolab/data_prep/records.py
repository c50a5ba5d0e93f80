"""Records into documents into token ids: the work each worker process does on a batch.

A batch is either a block of raw lines (JSONL, or text with one document per line) or a
list of items `(line, value)` where value is raw bytes (one text document) or an
already-parsed record (a dict from a .json array, parquet or HF datasets).
Every problem is reported with its file and line (or record number).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import numpy as np

from zerolab.data_prep.tokenizer import Tokenizer
from zerolab.errors import json_error_text

JSON_LINES = "jsonl"
TEXT_LINES = "text-lines"
ITEMS = "items"


class RecordProblem(Exception):
    """A record that cannot become a document; `reason` is the category counted in manifests."""

    def __init__(self, reason: str, detail: str):
        super().__init__(detail)
        self.reason = reason
        self.detail = detail


@dataclass(frozen=True)
class JsonField:
    """The document is one string field of each record."""

    key: str = "text"

    def text_of(self, record: dict) -> str:
        if self.key not in record:
            raise RecordProblem("missing key", f"no key {self.key!r} (keys: {', '.join(map(repr, record))})")
        return _string(record[self.key], self.key)


@dataclass(frozen=True)
class DollyFields:
    """dolly-15k: context, instruction, response joined by `separator`, empty fields left out
    unless `keep_empty` (then an empty context still contributes its separator)."""

    separator: str = "\n"
    keep_empty: bool = False
    keys: tuple[str, ...] = ("context", "instruction", "response")

    def text_of(self, record: dict) -> str:
        missing = [key for key in self.keys if key not in record]
        if missing:
            raise RecordProblem("missing key", f"no key {', '.join(map(repr, missing))} in a dolly record")
        parts = [_string(record[key], key) if record[key] is not None else "" for key in self.keys]
        return self.separator.join(parts if self.keep_empty else [p for p in parts if p])


def _string(value, key: str) -> str:
    if not isinstance(value, str):
        raise RecordProblem("not a string", f"key {key!r} holds {type(value).__name__}, not a string")
    return value


@dataclass
class Batch:
    """One unit of work: records from `source` starting at `first_line` (1-based)."""

    kind: str
    source: str
    first_line: int
    data: bytes = b""
    items: list = field(default_factory=list)


@dataclass
class BatchResult:
    """Tokens of the batch's documents, back to back with an EOD after each, and their sizes."""

    tokens: np.ndarray
    sizes: np.ndarray
    records: int
    problems: list[tuple[str, str, str]]  # (reason, "file:line", detail)
    stopped: bool = False


def _records(batch: Batch):
    """(line number, raw value) for each record of the batch; blank lines are not records."""
    if batch.kind == ITEMS:
        yield from batch.items
        return
    for number, line in enumerate(batch.data.split(b"\n"), start=batch.first_line):
        if line.strip():
            yield number, line


def _text(kind: str, value, fmt) -> str:
    if isinstance(value, dict):
        return fmt.text_of(value)
    try:
        text = value.decode("utf-8")
    except UnicodeDecodeError as error:
        raise RecordProblem("not UTF-8", f"bytes that are not UTF-8 at byte {error.start}") from None
    if kind != JSON_LINES:
        return text.removesuffix("\r") if kind == TEXT_LINES else text
    try:
        record = json.loads(text)
    except json.JSONDecodeError as error:
        raise RecordProblem("malformed JSON", f"malformed JSON ({json_error_text(error)})") from None
    if not isinstance(record, dict):
        raise RecordProblem("malformed JSON", f"a JSON object was expected, got {type(record).__name__}")
    return fmt.text_of(record)


def encode_batch(batch: Batch, fmt, on_error: str, dtype: str, tokenizer: Tokenizer) -> BatchResult:
    """Tokenize every record of `batch` with `tokenizer`; on a bad record stop (on_error='stop') or
    skip it."""
    parts: list[np.ndarray] = []
    sizes: list[int] = []
    problems = []
    records = 0
    eod = np.array([tokenizer.eod_id], dtype=np.uint32)
    encode = tokenizer.encoder()
    for number, value in _records(batch):
        records += 1
        try:
            text = _text(batch.kind, value, fmt)
            if not text:
                raise RecordProblem("empty document", "empty document")
            try:
                ids = encode(text)
            except UnicodeEncodeError:
                raise RecordProblem("invalid Unicode", "a lone surrogate (\\ud800-\\udfff escape)") from None
        except RecordProblem as problem:
            problems.append((problem.reason, f"{batch.source}:{number}", problem.detail))
            if on_error == "stop":
                return BatchResult(np.empty(0, dtype), np.empty(0, np.int32), records, problems, True)
            continue
        parts += (ids, eod)
        sizes.append(len(ids) + 1)
    tokens = np.concatenate(parts).astype(dtype) if parts else np.empty(0, dtype)
    return BatchResult(tokens, np.array(sizes, dtype=np.int32), records, problems)
