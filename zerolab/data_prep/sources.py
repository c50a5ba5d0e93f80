"""Where records come from: local files (plain, gzip or zstd; JSONL, text, a .json array,
parquet) or HF `datasets`. Each source yields `(batch, position_after, input_bytes)` from
a resumable position, reading as a stream: memory holds a few batches, never the corpus."""

from __future__ import annotations

import contextlib
import gzip
import io
import itertools
import json
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import zstandard

from zerolab.data_prep.records import ITEMS, JSON_LINES, Batch
from zerolab.errors import UserError, json_error_text
from zerolab.hf_folder import HUB_NAME, offline_asked, unreachable_hub

BATCH_BYTES = 1 << 20
BATCH_RECORDS = 512
GZIP_MAGIC = b"\x1f\x8b"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
START = {"file": 0, "offset": 0, "line": 0, "record": 0}


def compression_of(path: Path) -> str | None:
    """'gzip', 'zstd' or None, from the file's first bytes."""
    with open(path, "rb") as handle:
        head = handle.read(4)
    if head.startswith(GZIP_MAGIC):
        return "gzip"
    if head.startswith(ZSTD_MAGIC):
        return "zstd"
    return None


def open_stream(path: Path, raw: io.BufferedReader):
    """A binary stream of the decompressed content of `raw` (an open `path`); reading it raises a
    UserError naming the file when its compressed data is cut short or damaged."""
    compression = compression_of(path)
    if compression is None:
        return raw
    return io.BufferedReader(Decompressed(path, raw, compression), buffer_size=1 << 20)


RAW_BLOCK = 1 << 18
"""Compressed bytes read at a time (each a few MB decompressed)."""


class Decompressed(io.RawIOBase):
    """The decompressed content of a gzip or zstd file (its members or frames one after another), as
    a stream; UserError naming the file when the data ends inside a member or frame (cut short, as
    an interrupted download leaves it) or does not decompress (damaged)."""

    def __init__(self, path: Path, raw: io.BufferedReader, compression: str):
        super().__init__()
        self.path = path
        self.compression = compression
        self.inner = gzip.GzipFile(fileobj=raw, mode="rb") if compression == "gzip" else ZstdFrames(raw)

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        try:
            return self.inner.readinto(buffer)
        except EOFError:
            raise UserError(
                f"{self.path} is cut short: its {self.compression} data ends before the end of the "
                "stream (an interrupted download or copy?); download or copy it again"
            ) from None
        except (zlib.error, gzip.BadGzipFile, zstandard.ZstdError) as error:
            raise UserError(
                f"{self.path} is damaged: its {self.compression} data does not decompress ({error}); "
                "download or copy it again"
            ) from None


class ZstdFrames:
    """The content of zstd frames one after another, as `zstd` and `pzstd` write them; EOFError when
    the data ends inside a frame (zstandard's own stream reader ends quietly there)."""

    def __init__(self, raw: io.BufferedReader):
        self.raw = raw
        self.decompressor = zstandard.ZstdDecompressor()
        self.frame = None  # the decompressor of the frame being read; None between frames
        self.unused = b""  # compressed bytes after the end of the last frame, not yet decompressed
        self.pending = memoryview(b"")  # decompressed, not yet returned

    def readinto(self, buffer) -> int:
        while not self.pending:
            data = self.unused or self.raw.read(RAW_BLOCK)
            self.unused = b""
            if not data:
                if self.frame is not None:
                    raise EOFError("zstd data ended inside a frame")
                return 0
            if self.frame is None:
                self.frame = self.decompressor.decompressobj()
            self.pending = memoryview(self.frame.decompress(data))
            if self.frame.eof:
                self.unused, self.frame = self.frame.unused_data, None
        count = min(len(buffer), len(self.pending))
        buffer[:count] = self.pending[:count]
        self.pending = self.pending[count:]
        return count


def check_files(paths: list[str]) -> list[Path]:
    """The input files, each checked to be a file; UserError naming the first that is not."""
    files = [Path(p) for p in paths]
    for path in files:
        if path.is_dir():
            inside = sorted(child.name for child in path.iterdir() if child.is_file())[:3]
            example = f" (it holds {', '.join(inside)})" if inside else " (it holds no files)"
            raise UserError(f"input {path} is a directory{example}: give the files in it (e.g. {path}/*)")
        if not path.is_file():
            raise UserError(f"input file {path} does not exist (check the path)")
    return files


@dataclass
class LineFiles:
    """Files read as lines: JSONL records, or text with one document per line."""

    files: list[Path]
    kind: str = JSON_LINES
    block: int = BATCH_BYTES

    def describe(self) -> dict:
        return {"files": [file_facts(p) for p in self.files], "format": self.kind}

    def total_bytes(self) -> int | None:
        return total_bytes_of(self.files)

    def batches(self, start: dict) -> Iterator[tuple[Batch, dict, int]]:
        for index in range(start["file"], len(self.files)):
            resume = start if index == start["file"] else START
            yield from self._file_batches(index, resume["offset"], resume["line"])

    def _file_batches(self, index: int, offset: int, line: int):
        path = self.files[index]
        with open(path, "rb") as raw:
            stream = open_stream(path, raw)
            skip_bytes(stream, offset)
            carry = b""
            while True:
                data = stream.read(self.block)
                if not data:
                    break
                data = carry + data
                cut = data.rfind(b"\n") + 1
                if cut == 0:
                    carry = data
                    continue
                chunk, carry = data[:cut], data[cut:]
                yield from self._batch(index, chunk, offset, line)
                offset += len(chunk)
                line += chunk.count(b"\n")
            if carry:
                yield from self._batch(index, carry, offset, line)

    def _batch(self, index: int, chunk: bytes, offset: int, line: int):
        batch = Batch(self.kind, str(self.files[index]), line + 1, data=chunk)
        end = offset + len(chunk)
        # A file's last batch moves the position on to the next file.
        position = {"file": index, "offset": end, "line": line + chunk.count(b"\n"), "record": 0}
        yield batch, position, len(chunk)


def skip_bytes(stream, offset: int) -> None:
    """Move a (possibly decompressing) stream `offset` bytes on."""
    if not offset:
        return
    if stream.seekable():
        stream.seek(offset)
        return
    while offset > 0:
        data = stream.read(min(offset, 1 << 24))
        if not data:
            return
        offset -= len(data)


@dataclass
class WholeFiles:
    """Text files, each one document."""

    files: list[Path]

    def describe(self) -> dict:
        return {"files": [file_facts(p) for p in self.files], "format": "text, one document per file"}

    def total_bytes(self) -> int | None:
        return total_bytes_of(self.files)

    def batches(self, start: dict) -> Iterator[tuple[Batch, dict, int]]:
        for index in range(start["file"], len(self.files)):
            path = self.files[index]
            with open(path, "rb") as raw:
                data = open_stream(path, raw).read()
            batch = Batch(ITEMS, str(path), 1, items=[(1, data)])
            yield batch, {**START, "file": index + 1}, len(data)


@dataclass
class RecordFiles:
    """Files of parsed records: a .json array, or .parquet; numbered from 1 as 'lines'."""

    files: list[Path]
    columns: tuple[str, ...] = ()

    def describe(self) -> dict:
        return {"files": [file_facts(p) for p in self.files], "format": "records"}

    def total_bytes(self) -> int | None:
        return total_bytes_of(self.files)

    def batches(self, start: dict) -> Iterator[tuple[Batch, dict, int]]:
        for index in range(start["file"], len(self.files)):
            first = start["record"] if index == start["file"] else 0
            path = self.files[index]
            size = path.stat().st_size
            rows = _parquet_rows(path, self.columns) if ".parquet" in path.suffixes else _json_rows(path)
            rows = itertools.islice(rows, first, None)
            yield from _record_batches(
                rows, first, str(path), lambda n, i=index: {**START, "file": i, "record": n}
            )
            yield Batch(ITEMS, str(path), first + 1), {**START, "file": index + 1}, size


def _record_batches(rows, done: int, name: str, position_at) -> Iterator[tuple[Batch, dict, int]]:
    """Batches of `rows`, which follow the `done` records already processed."""
    items: list = []
    number = done
    for number, row in enumerate(rows, start=done + 1):
        items.append((number, row))
        if len(items) == BATCH_RECORDS:
            yield Batch(ITEMS, name, items[0][0], items=items), position_at(number), 0
            items = []
    if items:
        yield Batch(ITEMS, name, items[0][0], items=items), position_at(number), 0


def _json_rows(path: Path):
    try:
        with open(path, "rb") as raw:
            records = json.load(open_stream(path, raw))
    except json.JSONDecodeError as error:
        raise UserError(
            f"{path}: not a JSON array of records ({json_error_text(error, with_line=True)}); "
            "JSONL files need a .jsonl name"
        ) from None
    except UnicodeDecodeError as error:
        raise UserError(f"{path}: not UTF-8 (byte {error.start}); a JSON file is UTF-8 text") from None
    if not isinstance(records, list):
        raise UserError(f"{path}: a JSON array of records was expected, got {type(records).__name__}")
    for row in records:
        yield row if isinstance(row, dict) else {"": row}


def _parquet_rows(path: Path, columns: tuple[str, ...]):
    # pyarrow here, not at the top: heavy (0.4 s), loaded only for a parquet source
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        if compression_of(path):  # a compressed parquet file is read whole (its columns need seeking)
            with open(path, "rb") as raw:
                table = pq.ParquetFile(pa.BufferReader(open_stream(path, raw).read()))
        else:
            table = pq.ParquetFile(path)
    except UserError:
        raise
    except Exception as error:
        raise UserError(
            f"{path}: not a readable parquet file ({error}); if it was downloaded, it may be cut short "
            "or damaged: download it again"
        ) from None
    present = [c for c in columns if c in table.schema_arrow.names]
    batches = table.iter_batches(batch_size=BATCH_RECORDS, columns=present or None)
    while True:
        try:
            record_batch = next(batches, None)
        except Exception as error:
            raise UserError(
                f"{path} is damaged: a part of it does not decode ({error}); download or copy it again"
            ) from None
        if record_batch is None:
            return
        yield from record_batch.to_pylist()


GET_IT_BY_HAND = (
    "Without access to the Hugging Face hub, download the data where you can and pass it "
    "with --input (.jsonl, .json or .parquet; gzip or zstd compressed is fine)"
)


@dataclass
class HubDataset:
    """A dataset loaded through HF `datasets` (a hub name, or a local dataset directory)."""

    name: str
    split: str = "train"
    streaming: bool = False
    config: str | None = None
    """The dataset's configuration (e.g. `wikitext-103-raw-v1`), where it has several."""
    by_hand: str = GET_IT_BY_HAND
    """How to do without the hub: the end of every error (by default prep's --input)."""

    def describe(self) -> dict:
        facts = {"dataset": self.name, "split": self.split, "streaming": self.streaming}
        return facts | ({"config": self.config} if self.config else {})

    def total_bytes(self) -> None:
        return None

    def batches(self, start: dict) -> Iterator[tuple[Batch, dict, int]]:
        dataset = skip_rows(self.load(), start["record"])
        rows = self.guarded(iter(dataset))
        name = f"{self.name}[{self.split}]"
        yield from _record_batches(rows, start["record"], name, lambda n: {**START, "record": n})

    def folder_holds(self) -> str:
        """What a local dataset folder given as the name holds, for messages."""
        if self.config:
            return (
                f"a copy of the hub's dataset repository: its README.md and the folder {self.config}/ of its "
                "parquet files"
            )
        return "the dataset's data files (e.g. train.jsonl, or parquet files), as on the hub"

    def check_folder(self) -> str:
        """UserError when the name is a file, or a path with no folder there that cannot be a hub
        name either; else a note for the hub's failures where no folder of that name is here."""
        folder = Path(self.name).expanduser()
        if folder.is_dir():
            return ""
        if folder.exists():
            raise UserError(
                f"--dataset {self.name} is a file; give a dataset folder (it holds {self.folder_holds()}) "
                f"or a Hugging Face hub dataset name. {self.by_hand}"
            )
        if not HUB_NAME.fullmatch(self.name) or ".." in self.name or "--" in self.name:
            raise UserError(
                f"--dataset {self.name}: no such folder ({folder.absolute()} does not exist); a dataset "
                f"folder holds {self.folder_holds()}. {self.by_hand}"
            )
        return f"there is no folder {self.name} here, and "

    def load(self):
        """The dataset (an iterable one when streaming); offline, a cached copy or a UserError at once."""
        no_folder = self.check_folder()
        asked_offline = offline_asked()
        unreachable = not asked_offline and unreachable_hub()
        try:
            # datasets, huggingface_hub here, not at the top: heavy (1.3 s), loaded only when the hub is read
            import datasets
            import huggingface_hub.constants

            datasets.logging.set_verbosity_error()
            # unreachable: offline, where a cached copy still loads and none fails at once, not after retries;
            # HF_HUB_OFFLINE as it is now, not as it was when those modules were first imported
            offline = asked_offline or bool(unreachable)
            with _offline(datasets.config, huggingface_hub.constants, offline=offline):
                return datasets.load_dataset(
                    self.name, self.config, split=self.split, streaming=self.streaming
                )
        except Exception as error:
            self.check_compressed_files()
            if unreachable:
                raise UserError(
                    f"could not load {self.name!r}: {no_folder}the Hugging Face hub ({unreachable}) did not "
                    f"answer and no copy is cached here. {self.by_hand}"
                ) from None
            raise UserError(self._failure(error, no_folder)) from None

    def guarded(self, rows):
        """`rows` of the loaded dataset, with a failure of `datasets` while reading them turned into
        a UserError."""
        try:
            yield from rows
        except Exception as error:
            self.check_compressed_files()
            raise UserError(self._failure(error)) from None

    def check_compressed_files(self) -> None:
        """Where the name is a local folder: UserError naming the first of its compressed files that
        is cut short or damaged (what `datasets` failed on, reported as the file it is)."""
        folder = Path(self.name).expanduser()
        if not folder.is_dir():
            return
        for path in sorted(child for child in folder.rglob("*") if child.is_file()):
            if compression_of(path) is not None:
                with open(path, "rb") as raw, open_stream(path, raw) as stream:
                    while stream.read(RAW_BLOCK):
                        pass

    def _failure(self, error: Exception, no_folder: str = "") -> str:
        either = f"; there is no folder {self.name} here either" if no_folder else ""
        return (
            f"could not load {self.name!r} through Hugging Face datasets ({type(error).__name__}: {error})"
            f"{either}. {self.by_hand}"
        )


def skip_rows(dataset, count: int):
    """The rows of a loaded dataset after its first `count` (none where that is all of them: a
    run resumed after its last batch)."""
    if not count:
        return dataset
    if hasattr(dataset, "__len__") and count >= len(dataset):
        return []
    return dataset.skip(count)


@contextlib.contextmanager
def _offline(*configs: Any, offline: bool) -> Iterator[None]:
    """Within it, each of `configs` (modules with an HF_HUB_OFFLINE setting) has it `offline` or as it was."""
    before = [config.HF_HUB_OFFLINE for config in configs]
    for config in configs:
        config.HF_HUB_OFFLINE = offline or config.HF_HUB_OFFLINE
    try:
        yield
    finally:
        for config, value in zip(configs, before, strict=True):
            config.HF_HUB_OFFLINE = value


def total_bytes_of(files: list[Path]) -> int | None:
    """Input bytes for a progress bar; None when compressed (decompressed size unknown)."""
    if any(compression_of(p) for p in files):
        return None
    return sum(p.stat().st_size for p in files)


def file_facts(path: Path) -> dict:
    """What a manifest records of an input file: its path, size and compression."""
    return {"path": str(path), "bytes": path.stat().st_size, "compression": compression_of(path)}
