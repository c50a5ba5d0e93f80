"""model.attention=sdpa: the engine's CoreAttention computed by PyTorch's
scaled_dot_product_attention (fused flash or memory-efficient kernels on GPU, any device and
precision), a patch applied at launch when the render sets ZEROLAB_ATTENTION=sdpa."""

from __future__ import annotations

import os
import types
from typing import Any

from zerolab.contracts import ATTENTION_ENV, SDPA
from zerolab.rank.import_hooks import launch_patch, patch_after_import
from zerolab.rank.speed_switches import is_on
from zerolab.rank.workarounds import TRANSFORMER


def sdpa_wanted() -> bool:
    """Whether this launch asked for PyTorch's attention (ZEROLAB_ATTENTION=sdpa)."""
    value = os.environ.get(ATTENTION_ENV, "")
    if value not in ("", SDPA):
        raise ValueError(
            f"{ATTENTION_ENV}={value!r}: zerolab knows only {SDPA!r} (model.attention=sdpa); "
            "unset it for the engine's own attention"
        )
    return value == SDPA


def _sdpa_core_attention(module: types.ModuleType) -> None:
    # torch here, not at the top: only in the engine's environment
    import torch
    import torch.nn.functional as F

    core_attention = module.CoreAttention
    engine_forward = core_attention.forward
    causal = module.AttnMaskType.causal

    def whole_sequence_causal(attention: Any) -> bool:
        """GPT's mask: causal over the whole sequence (not one mask per document). Asked at every
        call, not kept on the layer: a compiled layer (speed.compiled_layers) would compile again for
        each layer that had not kept it yet."""
        return attention.attn_mask_type == causal and not module.get_args().reset_attention_mask

    def sdpa_forward(
        self: Any, query_layer: Any, key_layer: Any, value_layer: Any, attention_mask: Any
    ) -> Any:
        # [s, b, heads of this tensor-parallel rank, head size] in, [s, b, heads x head size] out.
        seq, batch, heads, head_size = query_layer.shape
        if key_layer.size(0) != seq or not whole_sequence_causal(self):
            return engine_forward(self, query_layer, key_layer, value_layer, attention_mask)
        query, key, value = (t.permute(1, 2, 0, 3) for t in (query_layer, key_layer, value_layer))
        # The engine scales by 1 / norm_factor, then (query-key layer scaling) by coeff in its softmax;
        # a compiled layer (speed.compiled_layers) takes 1/sqrt(head size) itself, the same number
        # but for rounding, where each layer's own coefficient would compile the layer once per layer.
        if torch.compiler.is_compiling():
            scale = head_size**-0.5
        else:
            scale = (self.scale_mask_softmax.scale or 1.0) / self.norm_factor
        dropout = self.attention_dropout.p if self.attention_dropout.training else 0.0

        def attend() -> Any:
            return F.scaled_dot_product_attention(
                query, key, value, dropout_p=dropout, is_causal=True, scale=scale
            )

        if self.sequence_parallel or (dropout == 0.0 and is_on("host_trims")):
            context = attend()
        else:  # the engine's attention dropout draws from its model-parallel RNG state
            with module.tensor_parallel.get_cuda_rng_tracker().fork():
                context = attend()
        return context.permute(2, 0, 1, 3).reshape(seq, batch, heads * head_size)

    sdpa_forward.__wrapped__ = engine_forward  # type: ignore[attr-defined]
    core_attention.forward = sdpa_forward


# The same function as CoreAttention: causal mask, scale 1/sqrt(head size) whatever the engine's
# query-key layer scaling, attention dropout with the engine's RNG tracker, each tensor-parallel
# rank's heads. Anything else (a mask per document, key length != query length in generation)
# runs the engine's own forward.
def sdpa_attention() -> None:
    """CoreAttention computed by PyTorch's scaled_dot_product_attention (model.attention=sdpa)."""
    patch_after_import(TRANSFORMER, _sdpa_core_attention)


SDPA_ATTENTION = launch_patch(sdpa_attention, sdpa_wanted, kind="patch")
