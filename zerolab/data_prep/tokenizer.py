"""The tokenizers whose ids `zerolab prep` writes: GPT-2's byte-level BPE as tiktoken, built
offline from the bundled vocab.json, a SentencePiece model (Llama's tokenizer.model), and a
Hugging Face tokenizer folder (its tokenizer.json, read by HF tokenizers).

GPT-2's ids equal Megatron's GPT2BPETokenizer: text is encoded as ordinary text, so a literal
`<|endoftext|>` inside a document is never the end-of-document id. A SentencePiece model's equal
Megatron's GPTSentencePieceTokenizer (sentencepiece's encode), each document ended by its eos id.
A Hugging Face folder's equal Megatron's HFTokenizer (AutoTokenizer's encode, special tokens such
as a BOS included), each document ended by the folder's eos token. Megatron's SentencePieceTokenizer
reads the same model file as GPTSentencePieceTokenizer but adds its special tokens (<CLS>, <SEP>,
<EOD>, <MASK> and the model's pad, bos and eos pieces) after the model's pieces where the model lacks
them, cuts text at them, and ends documents with <EOD>: its ids are written the same way.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import sentencepiece
import tiktoken
import tokenizers
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
HF = "HFTokenizer"
MEGATRON_SENTENCEPIECE = "SentencePieceTokenizer"
TOKENIZER_TYPES = (GPT2_BPE, SENTENCEPIECE, HF, MEGATRON_SENTENCEPIECE)
"""The Megatron tokenizer classes whose ids `zerolab prep` writes (recipe key data.tokenizer_type)."""
MODEL_TOKENIZERS = (SENTENCEPIECE, HF, MEGATRON_SENTENCEPIECE)
"""The classes that read data.tokenizer_model: a SentencePiece model file, a Hugging Face folder."""
HF_FILE, HF_CONFIG = "tokenizer.json", "tokenizer_config.json"


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


@functools.lru_cache(maxsize=4)
def _hf(folder: str, mtime_ns: int) -> tuple[tokenizers.Tokenizer, int]:
    """The folder's tokenizer.json and its eos token's id (loaded once while the file is unchanged)."""
    tokenizer = tokenizers.Tokenizer.from_file(str(Path(folder) / HF_FILE))
    config = json.loads((Path(folder) / HF_CONFIG).read_text(encoding="utf-8"))
    eos = config.get("eos_token")
    eos = eos.get("content") if isinstance(eos, dict) else eos
    eos_id = tokenizer.token_to_id(eos) if isinstance(eos, str) else None
    if eos_id is None:
        raise ValueError(f"its {HF_CONFIG} names no eos_token that {HF_FILE} has")
    return tokenizer, eos_id


def _load_hf(folder: Path) -> tuple[tokenizers.Tokenizer, int]:
    return _hf(str(folder.resolve()), (folder / HF_FILE).stat().st_mtime_ns)


def hf_problem(folder: Path) -> str | None:
    """Why `folder` is no Hugging Face tokenizer folder whose ids prep can write as Megatron's
    HFTokenizer reads them (tokenizer.json, and tokenizer_config.json naming the eos token that ends
    each document), or None."""
    missing = [name for name in (HF_FILE, HF_CONFIG) if not (folder / name).is_file()]
    if missing:
        return f"{folder} is no Hugging Face tokenizer folder: it lacks {' and '.join(missing)}"
    try:
        _load_hf(folder)
    except Exception as error:  # OSError, ValueError, and tokenizers' bare Exception for a bad file
        return f"{folder}: {error}"
    return None


def megatron_specials(path: Path) -> tuple[dict[str, int], int]:
    """The special tokens of Megatron's SentencePieceTokenizer for the model at `path`, with their ids
    in the order it adds them, and its vocabulary's size, as its _initalize makes them
    (megatron/tokenizer/tokenizer.py): each one the model lacks gets the next id after its pieces
    (worked out once while the file is unchanged: every batch of prep asks)."""
    stat = path.stat()
    return _megatron_specials(str(path.resolve()), stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=4)
def _megatron_specials(path: str, mtime_ns: int, size_bytes: int) -> tuple[dict[str, int], int]:
    model = _sentencepiece(path, mtime_ns, size_bytes)
    size = model.get_piece_size()
    vocab = {model.id_to_piece(index): index for index in range(size)}
    named = [(model.pad_id(), "<PAD>"), (model.bos_id(), "<BOS>"), (model.eos_id(), "<EOS>")]
    pieces = [model.id_to_piece(index) if 0 <= index < size else fallback for index, fallback in named]
    specials: dict[str, int] = {}
    for token in ["<CLS>", "<SEP>", "<EOD>", "<MASK>", *pieces]:
        vocab.setdefault(token, len(vocab))
        specials[token] = vocab[token]
    return specials, len(vocab)


def model_problem(path: Path) -> str | None:
    """Why the tokenizer model at `path` (a SentencePiece file or a Hugging Face folder) cannot be read."""
    return hf_problem(path) if path.is_dir() else sentencepiece_problem(path)


@dataclass(frozen=True)
class Tokenizer:
    """The tokenizer whose ids prep writes, as Megatron's tokenizer of the same type reads text:
    GPT-2's BPE (model_file None), the SentencePiece model file at model_file
    (GPTSentencePieceTokenizer: its `encode`, documents ended by the model's end-of-sentence id), or
    the Hugging Face folder at model_file (HFTokenizer: its encode with special tokens, documents
    ended by its eos token)."""

    model_file: Path | None = None
    megatron_specials: bool = False
    """With a SentencePiece model: Megatron's SentencePieceTokenizer (its special tokens added)."""

    @property
    def type(self) -> str:
        """Megatron's tokenizer class (--tokenizer-type)."""
        if self.model_file is None:
            return GPT2_BPE
        if self.model_file.is_dir():
            return HF
        return MEGATRON_SENTENCEPIECE if self.megatron_specials else SENTENCEPIECE

    def load(self) -> None:
        """Build the tokenizer now (before workers fork); UserError naming a bad model."""
        if self.model_file is None:
            gpt2_encoding()
        elif problem := model_problem(self.model_file):
            raise UserError(
                f"--tokenizer-model {problem}; give the tokenizer.model or the Hugging Face tokenizer folder "
                "your recipe's data.tokenizer_model names"
            )

    @property
    def vocab_size(self) -> int:
        """Entries of the vocabulary as Megatron counts them (before it pads them): for a Hugging Face
        folder, its vocabulary without the tokens added to it (the tokenizer's vocab_size)."""
        if self.model_file is None:
            return VOCAB_SIZE
        if self.type == HF:
            return _load_hf(self.model_file)[0].get_vocab_size(with_added_tokens=False)
        if self.type == MEGATRON_SENTENCEPIECE:
            return megatron_specials(self.model_file)[1]
        return _load(self.model_file).get_piece_size()

    @property
    def id_count(self) -> int:
        """One past the largest id the tokenizer writes (added tokens included)."""
        if self.type == HF:
            return _load_hf(self.model_file)[0].get_vocab_size(with_added_tokens=True)
        return self.vocab_size

    @property
    def eod_id(self) -> int:
        """The id that ends each document."""
        if self.model_file is None:
            return EOT_TOKEN_ID
        if self.type == HF:
            return _load_hf(self.model_file)[1]
        if self.type == MEGATRON_SENTENCEPIECE:
            return megatron_specials(self.model_file)[0]["<EOD>"]
        return _load(self.model_file).eos_id()

    def encoder(self) -> Callable[[str], np.ndarray]:
        """The function from text to its token ids (uint32), without an end-of-document id; the
        model is looked up once here, not at every document."""
        if self.model_file is None:
            return encode
        if self.type == HF:
            hf = _load_hf(self.model_file)[0]

            def encode_hf(text: str) -> np.ndarray:
                text.encode("utf-8")  # a lone surrogate raises UnicodeEncodeError, as for GPT-2
                return np.asarray(hf.encode(text).ids, dtype=np.uint32)

            return encode_hf
        model = _load(self.model_file)
        specials = megatron_specials(self.model_file)[0] if self.megatron_specials else {}
        cut = re.compile("|".join(map(re.escape, specials)))  # the earliest; of equals, the first added

        def encode_pieces(text: str) -> np.ndarray:
            try:
                if not specials:
                    return np.asarray(model.encode(text), dtype=np.uint32)
                ids, start = [], 0  # as SentencePieceTokenizer.tokenize: the text cut at special tokens
                for found in cut.finditer(text):
                    ids += [*model.encode(text[start : found.start()]), specials[found.group()]]
                    start = found.end()
                return np.asarray(ids + model.encode(text[start:]), dtype=np.uint32)
            except RuntimeError:
                text.encode("utf-8")  # a lone surrogate raises UnicodeEncodeError, as for GPT-2
                raise

        return encode_pieces

    def decode(self, ids) -> str:
        """Text of token ids."""
        if self.model_file is None:
            return decode(ids)
        if self.type == HF:
            return _load_hf(self.model_file)[0].decode([int(i) for i in ids])
        return _load(self.model_file).decode([int(i) for i in ids])

    def facts(self, *, with_path: bool = False) -> dict:
        """The tokenizer as fingerprints record it: type, files and their sha256, the vocabulary and
        end-of-document id; `with_path` (manifests): the SentencePiece model's path too."""
        if self.model_file is None:
            return tokenizer_facts()
        path = {"model_path": str(self.model_file.resolve())} if with_path else {}
        return {
            "type": self.type,
            "implementation": IMPLEMENTATIONS[self.type],
            "vocab_size": self.vocab_size,
            "eod_id": self.eod_id,
            "files": model_digests(self.model_file),
            **path,
        }


IMPLEMENTATIONS = {
    SENTENCEPIECE: "sentencepiece encode (ids equal Megatron's GPTSentencePieceTokenizer)",
    HF: "HF tokenizers encode of tokenizer.json (ids equal Megatron's HFTokenizer)",
    MEGATRON_SENTENCEPIECE: "sentencepiece encode between Megatron's special tokens (ids equal Megatron's "
    "SentencePieceTokenizer)",
}


def model_digests(model: Path) -> dict[str, str]:
    """The sha256 of a tokenizer model's files: the SentencePiece file, or a folder's tokenizer.json
    and tokenizer_config.json."""
    if model.is_dir():
        return {name: sha256_of(model / name) for name in (HF_FILE, HF_CONFIG)}
    return {model.name: sha256_of(model)}


def manifest_tokenizer(facts: dict | None, near: Path) -> Tokenizer | None:
    """The tokenizer of a dataset's manifest facts (pipeline.manifest_tokenizer_facts; GPT-2's where
    there are none), with its model (file or folder) at the path recorded or beside the dataset
    `near`; None where that model is not here."""
    if facts is None or facts.get("type", GPT2_BPE) not in MODEL_TOKENIZERS:
        return Tokenizer()
    files = facts.get("files") if isinstance(facts.get("files"), dict) else {}
    recorded = Path(str(facts.get("model_path", "")))
    candidates = [recorded] if facts.get("model_path") else []
    candidates += [near.parent / name for name in files] if facts["type"] != HF else []
    for candidate in candidates:
        if candidate.exists() and files and model_digests(candidate) == files:
            return Tokenizer(candidate, megatron_specials=facts["type"] == MEGATRON_SENTENCEPIECE)
    return None
