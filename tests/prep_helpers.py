"""Shared helpers of the data-prep tests."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import sentencepiece
import tokenizers
import zstandard

from zerolab.assets import GPT2_MERGES, GPT2_VOCAB
from zerolab.cli import main

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "prep"
SAMPLE = Path(__file__).resolve().parents[1] / "data_prep" / "samples" / "dolly151.jsonl"


def prep(*argv: str) -> int:
    """Run `zerolab prep ARGV...` in this process; its exit status."""
    return main(["prep", *argv, "--quiet"] if argv[0] != "inspect" else ["prep", *argv])


def owt_jsonl(tmp_path: Path, copies: int = 1) -> Path:
    """The OpenWebText fixture decompressed (and repeated `copies` times) into tmp_path."""

    data = zstandard.ZstdDecompressor().decompress((FIXTURES / "owt1000.jsonl.zst").read_bytes())
    path = tmp_path / f"owt{copies}.jsonl"
    path.write_bytes(data * copies)
    return path


def same_bytes(a: Path, b: Path) -> bool:
    return Path(a).read_bytes() == Path(b).read_bytes()


def manifest(prefix: Path) -> dict:
    return json.loads(Path(f"{prefix}_text_document.manifest.json").read_text())


def copy_fixture(name: str, tmp_path: Path) -> Path:
    return Path(shutil.copy(FIXTURES / name, tmp_path / name))


def hub_dataset_copy(folder: Path, config: str, splits: dict[str, list[dict]]) -> Path:
    """`folder` made a local copy of a hub dataset as `datasets` reads one: README.md naming the
    configuration `config` and its splits, one parquet file per split (the rows `splits` gives)."""
    # pyarrow here, not at the top: heavy (0.4 s)
    import pyarrow as pa
    import pyarrow.parquet as pq

    (folder / config).mkdir(parents=True)
    files = "".join(
        f"  - split: {split}\n    path: {config}/{split}-00000-of-00001.parquet\n" for split in splits
    )
    (folder / "README.md").write_text(f"---\nconfigs:\n- config_name: {config}\n  data_files:\n{files}---\n")
    for split, rows in splits.items():
        pq.write_table(pa.Table.from_pylist(rows), folder / config / f"{split}-00000-of-00001.parquet")
    return folder


def train_sentencepiece(folder: Path, vocab_size: int = 1000) -> Path:
    """A SentencePiece BPE model of `vocab_size` pieces trained on the dolly sample (Llama's ids:
    unk 0, bos 1, eos 2; byte fallback, so any text encodes), written as folder/tokenizer.model."""
    texts = [
        " ".join(str(value) for value in json.loads(line).values())
        for line in SAMPLE.read_text().splitlines()
    ]
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(texts), model_prefix=str(folder / "tokenizer"), vocab_size=vocab_size,
        model_type="bpe", byte_fallback=True, minloglevel=2,
    )  # fmt: skip
    return folder / "tokenizer.model"


def gpt2_hf_tokenizer(folder: Path) -> Path:
    """GPT-2's tokenizer as a Hugging Face folder made from zerolab's bundled vocab.json and merges.txt:
    tokenizer.json (HF tokenizers' byte-level BPE), the slow tokenizer's files and tokenizer_config.json
    naming <|endoftext|> as its eos token, as OpenAI's gpt2 repository on the Hub has them."""
    folder.mkdir(parents=True, exist_ok=True)
    bpe = tokenizers.Tokenizer(tokenizers.models.BPE.from_file(str(GPT2_VOCAB), str(GPT2_MERGES)))
    bpe.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = tokenizers.decoders.ByteLevel()
    bpe.post_processor = tokenizers.processors.ByteLevel(trim_offsets=False)
    bpe.add_special_tokens(["<|endoftext|>"])
    bpe.save(str(folder / "tokenizer.json"))
    shutil.copy(GPT2_VOCAB, folder / "vocab.json")
    shutil.copy(GPT2_MERGES, folder / "merges.txt")
    special = "<|endoftext|>"
    config = {"tokenizer_class": "GPT2Tokenizer", "model_max_length": 1024}
    config |= {"bos_token": special, "eos_token": special, "unk_token": special}
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    return folder
