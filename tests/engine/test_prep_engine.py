"""Megatron-DeepSpeed itself reads our output: its MMapIndexedDataset returns the documents,
and its GPT2BPETokenizer gives the same ids (run in the engine's Python, in a subprocess, under
what a rank applies before the training script)."""

import json

from engine_patch_helpers import run_on_engine
from prep_helpers import SAMPLE, prep

from zerolab.assets import EOT_TOKEN_ID, GPT2_MERGES, GPT2_VOCAB
from zerolab.data_prep.records import DollyFields

READ_WITH_MEGATRON = """
import json, sys
prefix, texts_path, vocab, merges = sys.argv[1:]
from megatron.data.indexed_dataset import MMapIndexedDataset
from megatron.tokenizer.gpt2_tokenization import GPT2Tokenizer
dataset = MMapIndexedDataset(prefix)
tokenizer = GPT2Tokenizer(vocab, merges, errors="replace", special_tokens=[], max_len=None)
texts = json.load(open(texts_path))
print(json.dumps({
    "documents": [dataset[i].tolist() for i in range(len(dataset))],
    "doc_idx": dataset.doc_idx.tolist(),
    "megatron_ids": [tokenizer.encode(text) for text in texts],
}))
"""

TRICKY = [
    "A literal <|endoftext|> inside a document is ordinary text.",
    "Ünïcödé, emoji 🙂🚀, CJK 漢字, RTL עברית, and\ttabs\r\nand   spaces  ",
    "It's we'll they've I'm you'd don't 123,456.78 $%^&*",
]


def test_megatron_reads_our_output_and_its_tokenizer_agrees(tmp_path, engine):
    records = [json.loads(line) for line in SAMPLE.read_text().splitlines()]
    texts = [DollyFields().text_of(record) for record in records] + TRICKY
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"text": text}) + "\n" for text in texts))
    out = tmp_path / "engine"
    assert prep("jsonl", str(corpus), "--out", str(out), "--workers", "2") == 0
    (tmp_path / "texts.json").write_text(json.dumps(texts))

    arguments = [f"{out}_text_document", str(tmp_path / "texts.json"), str(GPT2_VOCAB), str(GPT2_MERGES)]
    printed = run_on_engine(engine, READ_WITH_MEGATRON, *arguments)
    read = json.loads(printed.strip().splitlines()[-1])
    assert len(read["documents"]) == len(texts) == len(read["doc_idx"]) - 1
    for document, ids in zip(read["documents"], read["megatron_ids"], strict=True):
        assert document == [*ids, EOT_TOKEN_ID]
    assert EOT_TOKEN_ID not in read["megatron_ids"][len(records)]
