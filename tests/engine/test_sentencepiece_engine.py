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
