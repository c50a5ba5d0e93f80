"""The weight mapping between Hugging Face GPT-2 and the engine's GPT, both ways, owned by
zerolab/rank/hf_gpt2.py: a GPT2LMHeadModel's weights (random, made by transformers) go into
the engine's names and tensor-parallel pieces and come back the same, tensor for tensor. Run by
the engine's Python, where torch and transformers are."""

from __future__ import annotations

import subprocess

from zerolab.locations import REPO_ROOT

ROUND_TRIP = """
import torch
from transformers import GPT2Config, GPT2LMHeadModel
from zerolab.rank.hf_gpt2 import (
    CheckpointError, _merge_tensor_parallel, hf_state, megatron_from_hf, split_tensor_parallel,
)
torch.manual_seed(0)
model = GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=64, n_head=4, n_positions=128))
hf = model.state_dict()
padding = torch.zeros(50304 - 50257, 64)
megatron = megatron_from_hf(hf, padding)
assert megatron["language_model.embedding.word_embeddings.weight"].shape == (50304, 64)
back = hf_state(megatron, 50257)
assert set(back) == set(hf) - {"lm_head.weight"}, set(hf) ^ set(back)
assert all(torch.equal(back[name], hf[name]) for name in back)
for tensor in (2, 4):
    pieces = split_tensor_parallel(megatron, tensor)
    qkv = "language_model.encoder.layers.0.self_attention.query_key_value.weight"
    assert pieces[0][qkv].shape == (3 * 64 // tensor, 64)
    merged = _merge_tensor_parallel(pieces)
    assert all(torch.equal(merged[name], megatron[name]) for name in megatron)
hf["lm_head.weight"] = hf["lm_head.weight"].clone() + 1
try:
    megatron_from_hf(hf, padding)
except CheckpointError as error:
    print("refused:", error)
print("ok")
"""


def test_hf_weights_go_into_the_engines_layout_and_come_back_the_same(engine):
    _, python = engine
    result = subprocess.run(
        [str(python), "-c", ROUND_TRIP],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "refused: lm_head.weight differs from transformer.wte.weight" in result.stdout
    assert result.stdout.rstrip().endswith("ok")
