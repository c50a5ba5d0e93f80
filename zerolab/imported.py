"""The folder `zerolab import` writes: Hugging Face GPT-2 weights as engine checkpoints, one per
parallel layout (a DeepSpeed checkpoint tag, `tp2_pp1`), and its manifest zerolab-import.json
(ImportedWeights): where the weights came from, the model shape they have, the tokenizer their
token ids belong to (tokenizer_digest) and each layout's padded vocabulary. Written by
zerolab.export.importer; read by the recipe's input checks (model.init_from) and by the launch
that records where a run's weights came from."""

from __future__ import annotations

import hashlib
import itertools
import json
import shlex
from pathlib import Path

from pydantic import BaseModel, ConfigDict, PositiveInt, ValidationError

from zerolab.files import write_json_atomic

MANIFEST_FILE = "zerolab-import.json"
IMPORTS_DIR = Path("imports")
"""Where the commands zerolab suggests put imported weights (the shipped recipes' folders are there)."""


def layout_tag(tensor: int, pipeline: int) -> str:
    """The checkpoint tag (folder) of one parallel layout: `tp2_pp1`."""
    return f"tp{tensor}_pp{pipeline}"


def tokenizer_digest(vocab_file: Path, merge_file: Path) -> str:
    """SHA-256 of what a GPT-2 BPE tokenizer's files say, not how they are written: vocab.json's
    token-to-id pairs in id order, and merges.txt's merge rules (its `#version` line left out).
    ValueError naming the file that cannot be read as such."""
    try:
        vocab = json.loads(vocab_file.read_text(encoding="utf-8"))
        if not isinstance(vocab, dict):
            raise ValueError("not a JSON object of token: id")
        pairs = sorted(vocab.items(), key=lambda pair: pair[1])
    except (OSError, ValueError, TypeError) as error:
        raise ValueError(f"{vocab_file}: not a GPT-2 vocab.json ({error})") from None
    try:
        merges = [
            line
            for line in merge_file.read_text(encoding="utf-8").splitlines()
            if line and not line.startswith("#")
        ]
    except (OSError, ValueError) as error:
        raise ValueError(f"{merge_file}: not a GPT-2 merges.txt ({error})") from None
    text = json.dumps({"vocab": pairs, "merges": merges}, ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class ImportedShape(BaseModel):
    """The imported weights' shape, in the recipe's model keys."""

    model_config = ConfigDict(extra="forbid", strict=True)

    num_layers: PositiveInt
    hidden_size: PositiveInt
    num_attention_heads: PositiveInt
    max_position_embeddings: PositiveInt
    vocab_size: PositiveInt


class ImportedLayout(BaseModel):
    """One layout's checkpoint: its tensor- and pipeline-parallel sizes and its padded vocabulary."""

    model_config = ConfigDict(extra="forbid")

    tensor: int
    pipeline: int
    padded_vocab_size: int


class ImportedWeights(BaseModel):
    """zerolab-import.json."""

    model_config = ConfigDict(extra="forbid")

    source: str
    """The Hugging Face directory (resolved) or hub name the weights came from."""
    shape: ImportedShape
    make_vocab_size_divisible_by: int
    tokenizer_sha256: str
    """tokenizer_digest of the source's vocab.json and merges.txt: the tokenizer its token ids belong to."""
    layouts: dict[str, ImportedLayout]

    def layout(self, tensor: int, pipeline: int) -> ImportedLayout | None:
        """The checkpoint of that layout, if imported."""
        return self.layouts.get(layout_tag(tensor, pipeline))


def write_manifest(folder: Path, weights: ImportedWeights) -> None:
    """Write `folder`/zerolab-import.json."""
    write_json_atomic(folder / MANIFEST_FILE, weights.model_dump(mode="json"))


def read_manifest(folder: Path) -> ImportedWeights:
    """`folder`/zerolab-import.json; ValueError naming the file and what is wrong."""
    path = folder / MANIFEST_FILE
    if folder.exists() and not folder.is_dir():
        raise ValueError(f"{folder} is a file, not a folder written by `zerolab import`")
    if not path.is_file():
        raise ValueError(f"{path} not found: not a folder written by `zerolab import`")
    try:
        return ImportedWeights.model_validate(json.loads(path.read_text()))
    except (ValueError, ValidationError) as error:
        raise ValueError(f"{path}: not a manifest of `zerolab import` ({error})") from None


def import_hint(init_from: Path, import_command: str | None = None) -> str:
    """The commands that give model.init_from a folder of `zerolab import`, for an `init_from` that is
    none: a folder that does not exist yet is written by the recipe's `import_command` (or `zerolab
    import MODEL --out` it); a Hugging Face folder, or a file of one, is imported into a new folder
    under imports/; any other path that exists gets a new folder too (the import writes only new
    folders)."""
    if not init_from.exists():
        command = import_command or shlex.join(["zerolab", "import", "MODEL", "--out", str(init_from)])
        return f"write it with `{command}`"
    model = init_from if init_from.is_dir() else init_from.parent
    if not (model / "config.json").is_file():
        out = IMPORTS_DIR / "NAME"
        command = shlex.join(["zerolab", "import", "MODEL", "--out", str(out)])
        return f"import the weights into a new folder with `{command}` and set model.init_from={out}"
    name = model.resolve().name
    out = next(
        IMPORTS_DIR / candidate
        for candidate in itertools.chain([name], (f"{name}-{number}" for number in itertools.count(2)))
        if not (IMPORTS_DIR / candidate).exists()
    )
    command = shlex.join(["zerolab", "import", str(model), "--out", str(out)])
    return f"{model} is a Hugging Face model folder: import it with `{command}` and set model.init_from={out}"
