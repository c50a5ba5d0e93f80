"""data.tokenizer_type HFTokenizer on the real engine: Megatron's own HFTokenizer (transformers'
AutoTokenizer of the folder, the slow tokenizer) reads the ids `zerolab prep --tokenizer-model FOLDER`
wrote, its vocabulary and end-of-document id the manifest's, and the tiny recipe trains on them over
2 CPU ranks. Prep and checks: tests/unit/test_hf_tokenizer.py."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from engine_patch_helpers import run_on_engine
from engine_runs import train
from prep_helpers import SAMPLE, gpt2_hf_tokenizer, prep

from zerolab.data_prep.records import DollyFields

READ_WITH_MEGATRON = """
import json, sys
prefix, folder, texts = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
from megatron.data.indexed_dataset import MMapIndexedDataset
from megatron.tokenizer.tokenizer import _HFTokenizer
tokenizer = _HFTokenizer(folder, 128, False)
dataset = MMapIndexedDataset(prefix)
print(json.dumps({"vocab_size": tokenizer.vocab_size, "eod": tokenizer.eod,
                  "theirs": [tokenizer.tokenize(text) + [tokenizer.eod] for text in texts],
                  "ours": [dataset[i].tolist() for i in range(len(texts))]}))
"""


@pytest.fixture(scope="module")
def hf_dataset(tmp_path_factory):
    """A Hugging Face folder of GPT-2's tokenizer, and the dolly sample prepared with it."""
    folder = tmp_path_factory.mktemp("hf-tokenizer")
    tokenizer = gpt2_hf_tokenizer(folder / "gpt2")
    out = folder / "dolly"
    assert prep("dolly", "--input", str(SAMPLE), "--out", str(out), "--tokenizer-model", str(tokenizer)) == 0
    return tokenizer, f"{out}_text_document"


def test_megatrons_hf_tokenizer_reads_the_prepared_ids(engine, hf_dataset):
    tokenizer, prefix = hf_dataset
    records = [json.loads(line) for line in SAMPLE.read_text(encoding="utf-8").splitlines()[:20]]
    texts = [DollyFields().text_of(record) for record in records]  # the documents prep wrote
    printed = run_on_engine(engine, READ_WITH_MEGATRON, prefix, str(tokenizer), json.dumps(texts))
    read = json.loads(printed.strip().splitlines()[-1])
    manifest = json.loads(Path(f"{prefix}.manifest.json").read_text())["tokenizer"]
    assert (read["vocab_size"], read["eod"]) == (manifest["vocab_size"], manifest["eod_id"]) == (50257, 50256)
    assert read["ours"] == read["theirs"]


def test_the_tiny_recipe_trains_with_an_hf_tokenizer(engine, hf_dataset, tmp_path):
    tokenizer, prefix = hf_dataset
    run = train(
        prefix,
        tmp_path / "run",
        "cpu/tiny_dp",
        "data.tokenizer_type=HFTokenizer",
        f"data.tokenizer_model={tokenizer}",
        "train.save_interval=null",
    )
    assert (run.args["tokenizer_type"], run.args["tokenizer_model"]) == ("HFTokenizer", str(tokenizer))
    assert "> padded vocab (size: 50257) with 47 dummy tokens (new size: 50304)" in run.text
    assert np.all(np.isfinite(run.losses)) and len(run.losses) >= 2
