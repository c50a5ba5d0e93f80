"""WikiText (Merity et al., *Pointer Sentinel Mixture Models*, 2016) as documents: one article per
document, its lines kept as they are, as the language-model fine-tuning literature reads it before
the engine's dataset joins documents and cuts contiguous sequences. An article starts at a
top-level heading (` = Title = `; sections are ` = = Section = = `). Read from Salesforce's files
(`wiki.train.raw` and the like, plain or compressed) or from the hub's `Salesforce/wikitext`, whose
rows are the files' lines; both resume from the last article written."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from zerolab.data_prep.records import ITEMS, Batch
from zerolab.data_prep.sources import (
    BATCH_BYTES,
    BATCH_RECORDS,
    START,
    HubDataset,
    file_facts,
    open_stream,
    skip_bytes,
    skip_rows,
    total_bytes_of,
)

TITLE = re.compile(rb"^ = [^=].* = \r?\n?$")
"""A top-level heading line: ` = Valkyria Chronicles III = `."""

HUB_DATASET = "Salesforce/wikitext"
HUB_SPLITS = {"train": "train", "valid": "validation", "test": "test"}
"""zerolab's split names (the prepared files' OUT_<name>_text_document) -> the hub's."""
VERSIONS = ("2", "103")


def hub_config(version: str) -> str:
    """The hub's configuration of the raw text of WikiText-`version`."""
    return f"wikitext-{version}-raw-v1"


def articles(lines: Iterable[tuple[int, bytes]]) -> Iterator[tuple[int, int, bytes]]:
    """(number of the article's first line, number of the line after it, its text) for each article
    of `lines` ((number, line with its newline), in order); the blank lines around an article are
    not part of it, and text before the first heading is an article of its own."""
    body: list[tuple[int, bytes]] = []
    has_text = False
    for number, line in lines:
        if has_text and TITLE.match(line):
            yield _article(body, number)
            body, has_text = [], False
        body.append((number, line))
        has_text = has_text or bool(line.strip())
    if has_text:
        yield _article(body, body[-1][0] + 1)


def _article(body: list[tuple[int, bytes]], end: int) -> tuple[int, int, bytes]:
    first = next(i for i, (_, line) in enumerate(body) if line.strip())
    last = max(i for i, (_, line) in enumerate(body) if line.strip())
    return body[first][0], end, b"".join(line for _, line in body[first : last + 1])


@dataclass
class WikiTextFile:
    """One of Salesforce's WikiText files (`wiki.train.raw`, or `.tokens` of the tokenized release)."""

    path: Path

    def describe(self) -> dict:
        return {"files": [file_facts(self.path)], "format": "WikiText, one article per document"}

    def total_bytes(self) -> int | None:
        return total_bytes_of([self.path])

    def batches(self, start: dict) -> Iterator[tuple[Batch, dict, int]]:
        headings: dict[int, int] = {}  # line number -> byte offset, of the headings not yet passed

        def lines(stream) -> Iterator[tuple[int, bytes]]:
            offset = start["offset"]
            for number, line in enumerate(stream, start=start["line"] + 1):
                if TITLE.match(line):
                    headings[number] = offset
                offset += len(line)
                yield number, line
            headings[-1] = offset  # the end of the file

        items: list[tuple[int, bytes]] = []
        size = 0
        with open(self.path, "rb") as raw:
            stream = open_stream(self.path, raw)
            skip_bytes(stream, start["offset"])
            for first, end, text in articles(lines(stream)):
                items.append((first, text))
                size += len(text)
                if len(items) == BATCH_RECORDS or size >= BATCH_BYTES:
                    # resume at the next article's heading
                    position = {**START, "offset": headings.get(end, headings.get(-1)), "line": end - 1}
                    for passed in [n for n in headings if n <= end]:
                        del headings[passed]
                    yield Batch(ITEMS, str(self.path), items[0][0], items=items), position, size
                    items, size = [], 0
        if items:
            position = {**START, "offset": headings[-1], "line": end - 1}
            yield Batch(ITEMS, str(self.path), items[0][0], items=items), position, size


@dataclass
class WikiTextHub:
    """One split of WikiText's raw text through Hugging Face `datasets` (its rows are the lines)."""

    version: str
    split: str
    name: str = HUB_DATASET
    """The hub's dataset, or a local copy of it (a dataset directory with its configurations)."""

    @property
    def dataset(self) -> HubDataset:
        by_hand = (
            f"Without access to the Hugging Face hub, download {hub_config(self.version)}.zip (Salesforce's "
            "WikiText release) where you can and pass its files with --train wiki.train.raw --valid "
            "wiki.valid.raw --test wiki.test.raw"
        )
        return HubDataset(
            self.name, split=HUB_SPLITS[self.split], config=hub_config(self.version), by_hand=by_hand
        )

    def describe(self) -> dict:
        return self.dataset.describe()

    def total_bytes(self) -> None:
        return None

    def batches(self, start: dict) -> Iterator[tuple[Batch, dict, int]]:
        hub = self.dataset
        dataset = skip_rows(hub.load(), start["record"])
        name = f"{self.name}[{hub_config(self.version)}/{HUB_SPLITS[self.split]}]"
        rows = enumerate(hub.guarded(iter(dataset)), start=start["record"] + 1)
        items: list[tuple[int, bytes]] = []
        for first, end, text in articles((number, row["text"].encode()) for number, row in rows):
            items.append((first, text))
            if len(items) == BATCH_RECORDS:
                # resume at the next article's heading (row `end`, after end - 1 rows)
                yield Batch(ITEMS, name, items[0][0], items=items), {**START, "record": end - 1}, 0
                items = []
        if items:
            yield Batch(ITEMS, name, items[0][0], items=items), {**START, "record": end - 1}, 0
