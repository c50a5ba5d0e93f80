"""`zerolab prep inspect PREFIX`: what an indexed dataset holds, and whether .bin and .idx agree."""

from __future__ import annotations

import json
from pathlib import Path

from zerolab.checksums import sha256_of
from zerolab.data_prep.indexed import dataset_problems, read_document
from zerolab.data_prep.pipeline import SUFFIX, manifest_tokenizer_facts
from zerolab.data_prep.tokenizer import manifest_tokenizer
from zerolab.errors import UserError


def resolve_prefix(text: str) -> Path:
    """`data/dolly` or `data/dolly_text_document` (with or without .bin/.idx), or a folder holding
    one dataset (what `zerolab prep --out data/` writes) -> the file prefix."""
    prefix = Path(text.removesuffix(".bin").removesuffix(".idx"))
    for candidate in (Path(f"{prefix}{SUFFIX}"), prefix):
        if Path(f"{candidate}.idx").is_file() or Path(f"{candidate}.bin").is_file():
            return candidate
    if prefix.is_dir():
        found = sorted(prefix.glob(f"*{SUFFIX}.idx"))
        if len(found) == 1:
            return Path(str(found[0]).removesuffix(".idx"))
        if found:
            names = ", ".join(str(path.with_suffix("")) for path in found)
            raise UserError(f"{prefix} holds several datasets: give one of {names}")
        raise UserError(f"no *{SUFFIX}.idx in {prefix} (give the --out of `zerolab prep`)")
    raise UserError(f"no {prefix}{SUFFIX}.idx nor {prefix}.idx (give the --out of `zerolab prep`)")


def inspect(prefix_text: str, show: int, console) -> int:
    """Print the dataset's facts and `show` decoded documents; 1 when .bin and .idx disagree."""
    prefix = resolve_prefix(prefix_text)
    bin_path, idx_path = Path(f"{prefix}.bin"), Path(f"{prefix}.idx")
    for path in (bin_path, idx_path):
        if not path.is_file():
            console.print(f"[red]MISMATCH[/]: {path} is missing")
            return 1
    index, problems = dataset_problems(prefix)
    if index is None:
        console.print(f"[red]MISMATCH[/]: {problems[0]}")
        return 1
    problems += _manifest_problems(prefix, bin_path, idx_path)
    tokens = int(index.sizes.sum(dtype="int64")) if len(index) else 0
    console.print(f"[bold]{prefix}[/]")
    console.print(f"  documents: {len(index):,}")
    console.print(f"  tokens:    {tokens:,} (end-of-document tokens included)")
    console.print(f"  dtype:     {index.dtype.name}")
    console.print(
        f"  size:      {bin_path.stat().st_size:,} bytes .bin, {idx_path.stat().st_size:,} bytes .idx"
    )
    tokenizer = manifest_tokenizer(manifest_tokenizer_facts(prefix), prefix)
    if tokenizer is None:
        console.print(
            "  [dim]documents shown as ids: the SentencePiece model its manifest names is not here[/]"
        )
    if not problems:
        for i in range(min(show, len(index))):
            ids = read_document(bin_path, index, i)
            text = tokenizer.decode(ids) if tokenizer is not None else " ".join(map(str, ids.tolist()))
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
    try:
        files = json.loads(manifest_path.read_text())["files"]
        digests = {bin_path: files["bin"]["sha256"], idx_path: files["idx"]["sha256"]}
    except (ValueError, KeyError, TypeError):
        return [f"{manifest_path} is not a manifest of `zerolab prep` (not its JSON); prepare the data again"]
    return [
        f"{path} does not match the sha256 in {manifest_path}"
        for path, digest in digests.items()
        if sha256_of(path) != digest
    ]
