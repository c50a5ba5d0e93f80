"""`zerolab prep inspect PREFIX`: what an indexed dataset holds, and whether .bin and .idx agree."""

from __future__ import annotations

import json
from pathlib import Path

from zerolab.checksums import sha256_of
from zerolab.data_prep.indexed import index_problems, read_document, read_index
from zerolab.data_prep.pipeline import SUFFIX
from zerolab.data_prep.tokenizer import decode
from zerolab.errors import UserError


def resolve_prefix(text: str) -> Path:
    """`data/dolly` or `data/dolly_text_document` (with or without .bin/.idx) -> the file prefix."""
    prefix = Path(text.removesuffix(".bin").removesuffix(".idx"))
    for candidate in (Path(f"{prefix}{SUFFIX}"), prefix):
        if Path(f"{candidate}.idx").is_file() or Path(f"{candidate}.bin").is_file():
            return candidate
    raise UserError(f"no {prefix}{SUFFIX}.idx nor {prefix}.idx (give the --out of `zerolab prep`)")


def inspect(prefix_text: str, show: int, console) -> int:
    """Print the dataset's facts and `show` decoded documents; 1 when .bin and .idx disagree."""
    prefix = resolve_prefix(prefix_text)
    bin_path, idx_path = Path(f"{prefix}.bin"), Path(f"{prefix}.idx")
    for path in (bin_path, idx_path):
        if not path.is_file():
            console.print(f"[red]MISMATCH[/]: {path} is missing")
            return 1
    try:
        index = read_index(idx_path)
    except ValueError as error:
        console.print(f"[red]MISMATCH[/]: {error}")
        return 1
    problems = index_problems(index, bin_path)
    problems += _manifest_problems(prefix, bin_path, idx_path)
    tokens = int(index.sizes.sum(dtype="int64")) if len(index) else 0
    console.print(f"[bold]{prefix}[/]")
    console.print(f"  documents: {len(index):,}")
    console.print(f"  tokens:    {tokens:,} (end-of-document tokens included)")
    console.print(f"  dtype:     {index.dtype.name}")
    console.print(
        f"  size:      {bin_path.stat().st_size:,} bytes .bin, {idx_path.stat().st_size:,} bytes .idx"
    )
    if not problems:
        for i in range(min(show, len(index))):
            text = decode(read_document(bin_path, index, i))
            shown = text if len(text) <= 300 else text[:300] + "…"
            console.print(
                f"  [dim]document {i} ({int(index.sizes[i])} tokens):[/] {shown!r}", highlight=False
            )
    if problems:
        for problem in problems:
            console.print(f"[red]MISMATCH[/]: {problem}")
        return 1
    console.print("[green]OK[/]: .bin and .idx agree")
    return 0


def _manifest_problems(prefix: Path, bin_path: Path, idx_path: Path) -> list[str]:
    manifest_path = Path(f"{prefix}.manifest.json")
    if not manifest_path.is_file():
        return []
    files = json.loads(manifest_path.read_text())["files"]
    return [
        f"{path} does not match the sha256 in {manifest_path}"
        for path, facts in ((bin_path, files["bin"]), (idx_path, files["idx"]))
        if sha256_of(path) != facts["sha256"]
    ]
