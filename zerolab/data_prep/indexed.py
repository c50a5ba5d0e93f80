"""Megatron's indexed dataset, MMIDIDX version 1, little-endian.

`.idx`: magic `MMIDIDX\\x00\\x00` | version u64 = 1 | dtype code u8 | sequence count u64 |
document-index count u64 | sizes int32[N] | byte offsets int64[N] | document index
int64[N+1]. Each size counts the document's end-of-document token (the layout of
megatron-core's IndexedDatasetBuilder and GPT-NeoX). `.bin`: the tokens, back to back.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

MAGIC = b"MMIDIDX\x00\x00"
VERSION = 1
HEADER = struct.Struct("<9sQBQQ")
DTYPE_CODES = {np.dtype(np.uint8): 1, np.dtype(np.int8): 2, np.dtype(np.int16): 3, np.dtype(np.int32): 4,
               np.dtype(np.int64): 5, np.dtype(np.float64): 6, np.dtype(np.float32): 7,
               np.dtype(np.uint16): 8}  # fmt: skip
DTYPES = {code: dtype for dtype, code in DTYPE_CODES.items()}
CHUNK = 1 << 20


def token_dtype(vocab_size: int) -> np.dtype:
    """uint16 when every id fits (Megatron's rule: vocab < 65500), int32 otherwise."""
    return np.dtype(np.uint16) if vocab_size < 65500 else np.dtype(np.int32)


def write_index(path: Path, size_chunks: Callable[[], Iterable[np.ndarray]], count: int, dtype) -> None:
    """Write an .idx for `count` documents; `size_chunks()` yields their sizes (tokens, EOD
    included) in order and is called twice (sizes, then offsets), so memory stays at one
    chunk whatever the document count."""
    dtype = np.dtype(dtype)
    with open(path, "wb") as out:
        out.write(HEADER.pack(MAGIC, VERSION, DTYPE_CODES[dtype], count, count + 1))
        written = 0
        for chunk in size_chunks():
            out.write(np.asarray(chunk, dtype="<i4").tobytes())
            written += len(chunk)
        if written != count:
            raise ValueError(f"index expected {count} sizes, got {written}")
        offset = 0
        for chunk in size_chunks():
            if len(chunk) == 0:
                continue
            ends = offset + np.cumsum(chunk, dtype=np.int64) * dtype.itemsize
            out.write(np.concatenate(([offset], ends[:-1])).astype("<i8").tobytes())
            offset = int(ends[-1])
        for start in range(0, count + 1, CHUNK):
            out.write(np.arange(start, min(start + CHUNK, count + 1), dtype="<i8").tobytes())


@dataclass(frozen=True)
class Index:
    """A parsed .idx, arrays memory-mapped."""

    dtype: np.dtype
    sizes: np.ndarray
    pointers: np.ndarray
    doc_idx: np.ndarray

    def __len__(self) -> int:
        return len(self.sizes)


def read_index(path: Path) -> Index:
    """Parse an .idx file; ValueError naming the problem when it is not MMIDIDX v1."""
    path = Path(path)
    length = path.stat().st_size
    with open(path, "rb") as handle:
        head = handle.read(HEADER.size)
    if len(head) < HEADER.size or not head.startswith(MAGIC):
        raise ValueError(f"{path} is not a Megatron MMIDIDX index (bad magic)")
    _, version, code, count, doc_count = HEADER.unpack(head)
    if version != VERSION:
        raise ValueError(f"{path}: index version {version}, expected {VERSION}")
    if code not in DTYPES:
        raise ValueError(f"{path}: unknown dtype code {code}")
    expected = HEADER.size + count * 4 + count * 8 + doc_count * 8
    if length != expected:
        raise ValueError(f"{path}: {length:,} bytes, but its header describes {expected:,}")

    def view(dtype: str, offset: int, n: int) -> np.ndarray:
        return np.memmap(path, dtype=dtype, mode="r", offset=offset, shape=(n,)) if n else np.empty(0, dtype)

    sizes = view("<i4", HEADER.size, count)
    pointers = view("<i8", HEADER.size + count * 4, count)
    doc_idx = view("<i8", HEADER.size + count * 12, doc_count)
    return Index(DTYPES[code], sizes, pointers, doc_idx)


def index_problems(index: Index, bin_path: Path) -> list[str]:
    """Ways in which an index and its .bin disagree (empty when they agree), each naming the file.
    Reads the index's arrays and the .bin's size, never the .bin itself."""
    problems = []
    bin_path = Path(bin_path)
    idx_path = bin_path.with_suffix(".idx")
    itemsize = index.dtype.itemsize
    bin_bytes = bin_path.stat().st_size
    total: int | None = 0
    offset = 0
    offsets_agree = True
    for start in range(0, len(index), CHUNK):
        sizes = np.asarray(index.sizes[start : start + CHUNK], dtype=np.int64)
        if (sizes < 0).any():
            problems.append(f"{idx_path}: negative document sizes")
            total = None
            break
        ends = offset + np.cumsum(sizes) * itemsize
        starts = np.concatenate(([offset], ends[:-1]))
        if offsets_agree and not np.array_equal(starts, index.pointers[start : start + CHUNK]):
            problems.append(f"{idx_path}: byte offsets are not the running sum of the sizes")
            offsets_agree = False
        offset = int(ends[-1])
        total += int(sizes.sum())
    if total is not None and total * itemsize != bin_bytes:
        problems.append(
            f"the sizes in {idx_path} add up to {total:,} tokens ({total * itemsize:,} bytes) but "
            f"{bin_path} holds {bin_bytes:,} bytes"
        )
    doc_idx = np.asarray(index.doc_idx)
    if len(doc_idx) == 0 or doc_idx[0] != 0 or doc_idx[-1] != len(index) or (np.diff(doc_idx) < 0).any():
        problems.append(f"{idx_path}: the document index does not run from 0 to the sequence count")
    return problems


def dataset_problems(prefix: Path) -> tuple[Index | None, list[str]]:
    """The parsed index of the dataset `prefix`.bin + `prefix`.idx (None when it cannot be parsed), and
    what is wrong with the pair, each naming its file (none: the two agree). Reads the .idx and the
    .bin's size, never the .bin itself: quick enough to run before every launch. `zerolab prep
    inspect` and the launch's input checks both ask it."""
    bin_path, idx_path = Path(f"{prefix}.bin"), Path(f"{prefix}.idx")
    try:
        index = read_index(idx_path)
        return index, index_problems(index, bin_path)
    except ValueError as error:
        return None, [str(error)]
    except OSError as error:
        return None, [f"{error.filename}: {error.strerror}"]


def read_document(bin_path: Path, index: Index, i: int) -> np.ndarray:
    """Tokens of document `i` (its EOD included)."""
    count = int(index.sizes[i])
    return np.fromfile(bin_path, dtype=index.dtype, count=count, offset=int(index.pointers[i]))
