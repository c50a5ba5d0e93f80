"""data.tokenizer_type GPTSentencePieceTokenizer on the real engine: Megatron's own tokenizer gives the
ids `zerolab prep --tokenizer-model` wrote, and a tiny model with Llama's layers (the upstream Llama
scripts' flags through extra.megatron_args, rotary positions natively) trains on them over 2 CPU
ranks, its vocabulary the model's pieces. Checks and renders: tests/unit/test_sentencepiece.py."""

from __future__ import annotations

import json
import math

import numpy as np
from engine_patch_helpers import run_on_engine
from engine_runs import train
from prep_helpers import SAMPLE, prep

from zerolab.data_prep.records import DollyFields
from zerolab.data_prep.tokenizer import Tokenizer

READ_WITH_MEGATRON = """
import json, sys
prefix, model = sys.argv[1:]
from megatron.data.indexed_dataset import MMapIndexedDataset
from megatron.tokenizer.tokenizer import _GPTSentencePieceTokenizer
tokenizer = _GPTSentencePieceTokenizer(model)
dataset = MMapIndexedDataset(prefix)
print(json.dumps({"vocab_size": tokenizer.vocab_size, "eod": tokenizer.eod,
                  "first": dataset[0].tolist(), "text": tokenizer.detokenize(dataset[0].tolist()[:-1])}))
"""

LLAMA_LAYERS = (
    '--ffn-hidden-size,"128",--swiglu,--normalization,rmsnorm,--untie-embeddings-and-output-weights,'
    "--disable-bias-linear,--no-query-key-layer-scaling"
)


def test_megatrons_tokenizer_reads_the_prepared_ids(engine, sentencepiece_dataset):
    model, prefix = sentencepiece_dataset
    printed = run_on_engine(engine, READ_WITH_MEGATRON, prefix, str(model))
    read = json.loads(printed.strip().splitlines()[-1])
    assert (read["vocab_size"], read["eod"]) == (1000, 2)
    assert read["first"][-1] == read["eod"] and read["eod"] not in read["first"][:-1]
    assert read["text"].startswith("Why is Citizen Kane considered the Best Film?")


def test_a_model_with_llamas_layers_trains_on_sentencepiece_ids(engine, sentencepiece_dataset, tmp_path):
    model, prefix = sentencepiece_dataset
    run = train(
        prefix,
        tmp_path / "run",
        "cpu/tiny_dp",
        "data.tokenizer_type=GPTSentencePieceTokenizer",
        f"data.tokenizer_model={model}",
        "model.vocab_size=1000",
        "model.rotary=true",
        f"extra.megatron_args=[{LLAMA_LAYERS}]",
        "train.save_interval=null",
    )
    assert (run.args["tokenizer_type"], run.args["tokenizer_model"]) == (
        "GPTSentencePieceTokenizer",
        str(model),
    )
    assert (run.args["swiglu"], run.args["normalization"], run.args["add_bias_linear"]) == (
        True,
        "rmsnorm",
        False,
    )
    assert "> padded vocab (size: 1000) with 24 dummy tokens (new size: 1024)" in run.text
    # a random model's first loss is about ln(vocabulary): 1,000 pieces, not GPT-2's 50,257
    assert abs(run.losses[0] - math.log(1000)) < 0.5, run.losses
    assert np.all(np.isfinite(run.losses))


READ_WITH_MEGATRONS_SPECIALS = """
import json, sys
prefix, model, texts = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
from megatron.data.indexed_dataset import MMapIndexedDataset
from megatron.tokenizer.tokenizer import _SentencePieceTokenizer
tokenizer = _SentencePieceTokenizer(model)
dataset = MMapIndexedDataset(prefix)
print(json.dumps({"vocab_size": tokenizer.vocab_size, "eod": tokenizer.eod,
                  "theirs": [tokenizer.tokenize(text) + [tokenizer.eod] for text in texts],
                  "ours": [dataset[i].tolist() for i in range(len(texts))]}))
"""


def test_megatrons_sentencepiece_tokenizer_with_its_special_tokens_reads_the_prepared_ids(
    engine, sentencepiece_dataset, tmp_path
):
    """SentencePieceTokenizer (as in llm-jp's and Easy-Megatron-DeepSpeed's launches): the same model
    with <CLS> <SEP> <EOD> <MASK> <PAD> added after its 1,000 pieces, text cut at them, <EOD> ending
    each document; prepared by `zerolab prep --tokenizer-type SentencePieceTokenizer`, then trained."""
    model, _ = sentencepiece_dataset
    out = tmp_path / "dolly"
    argv = ["dolly", "--input", str(SAMPLE), "--out", str(out), "--tokenizer-model", str(model)]
    assert prep(*argv, "--tokenizer-type", "SentencePieceTokenizer") == 0
    records = [json.loads(line) for line in SAMPLE.read_text(encoding="utf-8").splitlines()[:20]]
    texts = [DollyFields().text_of(record) for record in records]
    texts[0] += " <SEP> and <MASK>"  # cut at special tokens, as Megatron's tokenize does
    printed = run_on_engine(
        engine, READ_WITH_MEGATRONS_SPECIALS, f"{out}_text_document", str(model), json.dumps(texts)
    )
    read = json.loads(printed.strip().splitlines()[-1])
    assert (read["vocab_size"], read["eod"]) == (1005, 1002)
    assert read["ours"][1:] == read["theirs"][1:]  # the documents prep wrote
    with_specials = [*Tokenizer(model, megatron_specials=True).encoder()(texts[0]).tolist(), 1002]
    assert with_specials == read["theirs"][0] and {1001, 1003} <= set(with_specials)
    run = train(
        f"{out}_text_document",
        tmp_path / "run",
        "cpu/tiny_dp",
        "data.tokenizer_type=SentencePieceTokenizer",
        f"data.tokenizer_model={model}",
        "model.vocab_size=1005",
        "train.save_interval=null",
    )
    assert run.args["tokenizer_type"] == "SentencePieceTokenizer" and np.all(np.isfinite(run.losses))
