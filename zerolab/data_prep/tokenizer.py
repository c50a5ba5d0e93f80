"""The tokenizers whose ids `zerolab prep` writes: GPT-2's byte-level BPE as tiktoken, built
offline from the bundled vocab.json, and a SentencePiece model (Llama's tokenizer.model).

GPT-2's ids equal Megatron's GPT2BPETokenizer: text is encoded as ordinary text, so a literal
`<|endoftext|>` inside a document is never the end-of-document id. A SentencePiece model's equal
Megatron's GPTSentencePieceTokenizer (sentencepiece's encode), each document ended by its eos id.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import sentencepiece
import tiktoken
from tiktoken_ext.openai_public import r50k_pat_str

from zerolab.assets import EOT_TOKEN_ID, GPT2_MERGES, GPT2_VOCAB
from zerolab.checksums import sha256_of
from zerolab.errors import UserError

END_OF_TEXT = "<|endoftext|>"
VOCAB_SIZE = 50257


def _bytes_to_unicode() -> dict[str, int]:
    """GPT-2's table from the printable characters of vocab.json back to bytes."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), 256)]
    chars = list(printable)
    extra = 0
    for byte in range(256):
        if byte not in printable:
            printable.append(byte)
            chars.append(256 + extra)
            extra += 1
    return {chr(char): byte for byte, char in zip(printable, chars, strict=True)}


def mergeable_ranks(vocab_path: Path = GPT2_VOCAB) -> dict[bytes, int]:
    """BPE ranks for tiktoken: in GPT-2's vocab.json a token's id is its merge rank."""
    byte_of = _bytes_to_unicode()
    vocab = json.loads(Path(vocab_path).read_text(encoding="utf-8"))
    return {bytes(byte_of[c] for c in token): rank for token, rank in vocab.items() if token != END_OF_TEXT}


@functools.lru_cache(maxsize=1)
def gpt2_encoding():
    """The GPT-2 tiktoken Encoding made from the bundled files (nothing downloaded)."""
    return tiktoken.Encoding(
        "gpt2-zerolab",
        pat_str=r50k_pat_str,
        mergeable_ranks=mergeable_ranks(),
        special_tokens={END_OF_TEXT: EOT_TOKEN_ID},
        explicit_n_vocab=VOCAB_SIZE,
    )


def encode(text: str):
    """Token ids of `text` as a numpy uint32 array, without an end-of-document token."""
    return gpt2_encoding().encode_to_numpy(text, allowed_special=set(), disallowed_special=())


def decode(ids) -> str:
    """Text of token ids (invalid UTF-8 shown as U+FFFD)."""
    return gpt2_encoding().decode([int(i) for i in ids])


def tokenizer_facts() -> dict:
    """The tokenizer as recorded in manifests: type, files, their sha256, the EOD id."""
    return {
        "type": "GPT2BPETokenizer",
        "implementation": "tiktoken encode_ordinary (ids equal Megatron's GPT2BPETokenizer)",
        "vocab_size": VOCAB_SIZE,
        "eod_id": EOT_TOKEN_ID,
        "files": {path.name: sha256_of(path) for path in (GPT2_VOCAB, GPT2_MERGES)},
    }


GPT2_BPE = "GPT2BPETokenizer"
SENTENCEPIECE = "GPTSentencePieceTokenizer"
TOKENIZER_TYPES = (GPT2_BPE, SENTENCEPIECE)
"""The Megatron tokenizer classes whose ids `zerolab prep` writes (recipe key data.tokenizer_type)."""


@functools.lru_cache(maxsize=4)
def _sentencepiece(path: str, mtime_ns: int, size: int):
    """The SentencePiece model at `path` (loaded once while the file is unchanged)."""
    return sentencepiece.SentencePieceProcessor(model_file=path)


def sentencepiece_problem(path: Path) -> str | None:
    """Why the file at `path` is no SentencePiece model Megatron's GPTSentencePieceTokenizer can
    end documents with, or None."""
    try:
        model = _load(path)
    except (OSError, RuntimeError) as error:
        return f"{path} is not a SentencePiece model ({str(error).strip() or type(error).__name__})"
    if model.eos_id() < 0:
        return (
            f"{path} has no end-of-sentence piece (eos_id -1): Megatron's GPTSentencePieceTokenizer ends "
            "each document with it"
        )
    return None


def _load(path: Path):
    stat = path.stat()
    return _sentencepiece(str(path.resolve()), stat.st_mtime_ns, stat.st_size)


@dataclass(frozen=True)
class Tokenizer:
    """The tokenizer whose ids prep writes, as Megatron's tokenizer of the same type reads text:
    GPT-2's BPE (model_file None), or the SentencePiece model at model_file (GPTSentencePieceTokenizer:
    its `encode`, documents ended by the model's end-of-sentence id)."""

    model_file: Path | None = None

    @property
    def type(self) -> str:
        """Megatron's tokenizer class (--tokenizer-type)."""
        return GPT2_BPE if self.model_file is None else SENTENCEPIECE

    def load(self) -> None:
        """Build the tokenizer now (before workers fork); UserError naming a bad model file."""
        if self.model_file is None:
            gpt2_encoding()
        elif problem := sentencepiece_problem(self.model_file):
            raise UserError(f"--tokenizer-model {problem}; give the tokenizer.model your recipe names")

    @property
    def vocab_size(self) -> int:
        """Entries of the vocabulary (before Megatron pads it)."""
        return VOCAB_SIZE if self.model_file is None else _load(self.model_file).get_piece_size()

    @property
    def eod_id(self) -> int:
        """The id that ends each document."""
        return EOT_TOKEN_ID if self.model_file is None else _load(self.model_file).eos_id()

    def encoder(self) -> Callable[[str], np.ndarray]:
        """The function from text to its token ids (uint32), without an end-of-document id; the
        model is looked up once here, not at every document."""
        if self.model_file is None:
            return encode
        model = _load(self.model_file)

        def encode_pieces(text: str) -> np.ndarray:
            try:
                ids = model.encode(text)
            except RuntimeError:
                text.encode("utf-8")  # a lone surrogate raises UnicodeEncodeError, as for GPT-2
                raise
            return np.asarray(ids, dtype=np.uint32)

        return encode_pieces

    def decode(self, ids) -> str:
        """Text of token ids."""
        if self.model_file is None:
            return decode(ids)
        return _load(self.model_file).decode([int(i) for i in ids])

    def facts(self, *, with_path: bool = False) -> dict:
        """The tokenizer as fingerprints record it: type, files and their sha256, the vocabulary and
        end-of-document id; `with_path` (manifests): the SentencePiece model's path too."""
        if self.model_file is None:
            return tokenizer_facts()
        path = {"model_path": str(self.model_file.resolve())} if with_path else {}
        return {
            "type": SENTENCEPIECE,
            "implementation": "sentencepiece encode (ids equal Megatron's GPTSentencePieceTokenizer)",
            "vocab_size": self.vocab_size,
            "eod_id": self.eod_id,
            "files": {self.model_file.name: sha256_of(self.model_file)},
            **path,
        }


def manifest_tokenizer(facts: dict | None, near: Path) -> Tokenizer | None:
    """The tokenizer of a dataset's manifest facts (pipeline.manifest_tokenizer_facts; GPT-2's where
    there are none), with its SentencePiece model at the path recorded or beside the dataset `near`;
    None where that model is not here."""
    if facts is None or facts.get("type", GPT2_BPE) != SENTENCEPIECE:
        return Tokenizer()
    files = facts.get("files")
    for name, digest in files.items() if isinstance(files, dict) else ():
        for candidate in (Path(str(facts.get("model_path", name))), near.parent / name):
            if candidate.is_file() and sha256_of(candidate) == digest:
                return Tokenizer(candidate)
    return None
