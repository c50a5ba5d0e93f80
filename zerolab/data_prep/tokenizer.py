"""GPT-2's byte-level BPE as tiktoken, built offline from the bundled vocab.json.

Token ids equal Megatron's GPT2BPETokenizer: text is encoded as ordinary text, so a
literal `<|endoftext|>` inside a document is never the end-of-document id.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

import tiktoken
from tiktoken_ext.openai_public import r50k_pat_str

from zerolab.assets import EOT_TOKEN_ID, GPT2_MERGES, GPT2_VOCAB
from zerolab.checksums import sha256_of

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
