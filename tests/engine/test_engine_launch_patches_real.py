"""The opt-in patches on the real engine: megatron_entry takes them when asked, and sdpa is the
engine's attention (its forward and backward against the engine's own). Their switches:
tests/unit/test_engine_launch_patches.py."""

from __future__ import annotations

from engine_patch_helpers import one_rank_env, run_on_engine


def test_real_engine_takes_the_opt_in_patches(engine, tmp_path):
    out = run_on_engine(
        engine,
        """
        import megatron.training, megatron.model.transformer as transformer
        forward = transformer.CoreAttention.forward
        print(forward.__name__, forward.__wrapped__.__name__, megatron.training.train_step.__name__)
        """,
        ZEROLAB_ATTENTION="sdpa",
        ZEROLAB_PROFILE_DIR=str(tmp_path),
    )
    assert out.split("\n")[0] == "sdpa_forward contiguous_forward profiled_train_step"


SDPA_AGAINST_THE_ENGINE = """
    import dataclasses, torch
    sys.argv = ["pretrain_gpt.py", "--num-layers", "4", "--hidden-size", "64", "--num-attention-heads", "4",
        "--seq-length", "32", "--max-position-embeddings", "32", "--micro-batch-size", "3",
        "--global-batch-size", "3", "--tokenizer-type", "GPT2BPETokenizer",
        "--vocab-file", "zerolab/assets/gpt2/vocab.json", "--merge-file", "zerolab/assets/gpt2/merges.txt",
        "--distributed-backend", "gloo", "--no-gradient-accumulation-fusion"]
    from megatron import get_args
    from megatron.arguments import core_transformer_config_from_args
    from megatron.core import tensor_parallel
    from megatron.initialize import initialize_megatron
    from megatron.model.enums import AttnMaskType
    from megatron.model.transformer import CoreAttention
    initialize_megatron(allow_no_cuda=True)
    config = core_transformer_config_from_args(get_args())
    sdpa, engine = CoreAttention.forward, CoreAttention.forward.__wrapped__
    seq, batch, heads, size = 32, 3, 4, 16
    mask = torch.triu(torch.ones(1, 1, seq, seq, dtype=torch.bool), diagonal=1)  # GPT's: True is hidden

    def attention(**changes):  # layer 3: query-key layer scaling divides by 3, the softmax multiplies
        changes = {"attention_dropout": 0.0, **changes}
        return CoreAttention(3, dataclasses.replace(config, **changes), AttnMaskType.causal)

    def run(forward, layer, mixed):
        # q, k and v cut from one projection, as the engine does: strided views
        mixed = mixed.detach().clone().requires_grad_()
        q, k, v = (mixed[..., i * heads * size:(i + 1) * heads * size].view(seq, batch, heads, size)
                   for i in range(3))
        out = forward(layer, q, k, v, mask)
        out.float().square().sum().backward()
        return [out.detach().float(), mixed.grad.float()]

    def worst(a, b):
        return max(float((x - y).abs().max()) for x, y in zip(a, b))

    torch.manual_seed(0)
    mixed = torch.randn(seq, batch, 3 * heads * size)
    for changes in ({}, {"apply_query_key_layer_scaling": False}):
        layer = attention(**changes)
        print("fp32", worst(run(sdpa, layer, mixed), run(engine, layer, mixed)))
    exact = run(engine, attention(), mixed)
    half = attention(bf16=True, params_dtype=torch.bfloat16, masked_softmax_fusion=False)
    print("bf16", *(worst(run(forward, half, mixed.bfloat16()), exact) for forward in (sdpa, engine)))

    dropping = attention(attention_dropout=0.5)
    q, k, v = (mixed[..., i * heads * size:(i + 1) * heads * size].view(seq, batch, heads, size)
               for i in range(3))
    tracker = tensor_parallel.get_cuda_rng_tracker()
    saved, default = tracker.get_states(), torch.get_rng_state()
    dropped = sdpa(dropping, q, k, v, mask)
    print("default stream untouched", torch.equal(torch.get_rng_state(), default))
    tracker.set_states(saved)
    print("replayed from the tracker", torch.equal(sdpa(dropping, q, k, v, mask), dropped))
    kept = sdpa(dropping.eval(), q, k, v, mask)
    print("eval drops none", torch.equal(kept, sdpa(attention(), q, k, v, mask)))
    print("training drops some", not torch.equal(kept, dropped))
"""


def test_sdpa_is_the_engines_attention(engine):
    """Forward and backward against the engine's CoreAttention on the same strided q/k/v (micro
    batch 3, 4 heads, causal): equal in fp32 with and without query-key layer scaling, as close to
    fp32 as the engine's own in bf16; dropout drawn from the engine's model-parallel RNG tracker."""
    out = run_on_engine(
        engine,
        SDPA_AGAINST_THE_ENGINE,
        ZEROLAB_ATTENTION="sdpa",
        **one_rank_env(),
    )
    lines = [line.split() for line in out.splitlines() if line.startswith(("fp32", "bf16"))]
    assert [line[0] for line in lines] == ["fp32", "fp32", "bf16"]
    assert all(float(line[1]) < 1e-5 for line in lines[:2]), lines
    sdpa_error, engine_error = float(lines[2][1]), float(lines[2][2])
    assert 0 < sdpa_error <= 1.25 * engine_error, lines[2]
    assert "default stream untouched True" in out
    assert "replayed from the tracker True" in out
    assert "eval drops none True" in out and "training drops some True" in out
