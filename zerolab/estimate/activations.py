"""Activation memory of Megatron's GPT layers, after Korthikanti et al. 2022 ("Reducing
Activation Recomputation in Large Transformer Models", section 4): per layer, for s x b tokens,
hidden h and a heads, 16-bit, s*b*h*(34 + 5*a*s/h) bytes; with tensor parallel t,
s*b*h*(10 + 24/t + 5*a*s/(h*t)). The terms are kept apart here so that the precision, the MLP
width, dropout, the attention kind and the recompute setting change the right ones."""

from __future__ import annotations

from dataclasses import dataclass

from zerolab.estimate.shape import Shape, Stage
from zerolab.recipe.schema import ActivationCheckpointingSection

FP32_BYTES = 4
MASK_BYTES = 1


def fused_softmax(shape: Shape, precision_bytes: int) -> bool:
    """Whether Megatron's fused scale-mask-softmax kernel runs (16-bit input, 16 < s <= 4096,
    s and micro batch x heads per tensor rank multiples of 4); otherwise the torch path keeps an
    fp32 copy of the probabilities (Megatron applies query-key layer scaling, hence fp32 softmax)."""
    heads = shape.heads // shape.tensor
    return (
        precision_bytes == 2
        and 16 < shape.seq <= 4096
        and shape.seq % 4 == 0
        and (shape.micro_batch * heads) % 4 == 0
    )


@dataclass(frozen=True)
class LayerActivations:
    """Bytes one transformer layer keeps for its backward pass, one micro batch, no recompute."""

    replicated: int
    split: int
    scores: int

    @property
    def total(self) -> int:
        """Every term."""
        return self.replicated + self.split + self.scores


def layer_activations(shape: Shape, p: int) -> LayerActivations:
    """The per-layer terms for activations of `p` bytes.

    replicated (on every tensor rank): the two layer-norm inputs and outputs (2p each per token and
    hidden unit) and the two hidden-dropout masks (1 byte); split across tensor ranks: Q, K, V and the
    attention context (4p) and the MLP's GeLU input and fc2 input (2p x ffn/h); the attention scores
    (megatron attention only): softmax output, dropout mask and dropout output per head, s x s each."""
    sbh = shape.tokens * shape.hidden
    masks = 2 * MASK_BYTES if shape.hidden_dropout > 0 else 0
    replicated = sbh * (4 * p + masks)
    split = (4 * p * sbh + 2 * p * shape.tokens * shape.ffn) // shape.tensor
    scores = 0
    if shape.attention == "megatron":
        per_score = p if fused_softmax(shape, p) else FP32_BYTES
        if shape.attention_dropout > 0:
            per_score += MASK_BYTES + p
        elif not fused_softmax(shape, p) and p != FP32_BYTES:
            per_score += p  # the 16-bit copy of the fp32 probabilities multiplies V
        scores = per_score * (shape.heads // shape.tensor) * shape.seq * shape.tokens
    return LayerActivations(replicated, split, scores)


def attention_buffer(shape: Shape, p: int) -> int:
    """Megatron's persistent global buffer for the raw attention scores ([b*a/t, s, s], megatron
    attention only): allocated in the first forward pass and kept."""
    if shape.attention != "megatron":
        return 0
    return p * (shape.heads // shape.tensor) * shape.seq * shape.tokens


def loss_peak(shape: Shape, p: int) -> int:
    """The cross entropy's transient at the end of the forward pass, [s, b, V/t] each: the logits
    (16-bit), their fp32 copy (Megatron computes the loss in fp32) and the max-shifted fp32 logits
    that become the saved softmax. In fp32 the copy is the logits themselves. A fine-tuning's head
    has a logit per label, not per vocabulary entry."""
    logits = shape.tokens * (shape.outputs // shape.tensor)
    return logits * (FP32_BYTES + FP32_BYTES + (p if p != FP32_BYTES else 0))


@dataclass(frozen=True)
class StageActivations:
    """What one pipeline stage holds for activations, in bytes."""

    per_layer: LayerActivations
    kept_per_layer: float
    kept_per_micro_batch: int
    in_flight: int
    working_set: int
    loss: int
    buffer: int
    host_checkpoints: int

    @property
    def kept(self) -> int:
        """Kept activations of every micro batch in flight."""
        return self.kept_per_micro_batch * self.in_flight


def stage_activations(
    shape: Shape, stage: Stage, p: int, ckpt: ActivationCheckpointingSection
) -> StageActivations:
    """Activations of `stage` under the recompute setting `ckpt`.

    none: every layer keeps everything. selective: the attention scores are recomputed, one layer's
    worth at a time. full/uniform: only the input of each chunk of num_layers layers is kept
    (p*s*b*h; split across tensor ranks with DeepSpeed's partition_activations; on the host with
    cpu_checkpointing), and a chunk's full activations are rebuilt in the backward pass. full/block:
    the first num_layers layers of the stage keep their input only, the others everything."""
    layer = layer_activations(shape, p)
    sbh = shape.tokens * shape.hidden
    layers = stage.layers
    chunk = ckpt.num_layers or 1
    checkpoint = p * sbh // (shape.tensor if ckpt.partition_activations else 1)
    host = 0
    if ckpt.granularity == "none":
        kept, working = layers * layer.total, 0
    elif ckpt.granularity == "selective":
        kept, working = layers * (layer.total - layer.scores), layer.scores
    elif ckpt.method == "block":
        kept = chunk * checkpoint + (layers - chunk) * layer.total
        working = layer.total
    else:
        kept = layers // chunk * checkpoint
        working = chunk * layer.total
        if ckpt.cpu_checkpointing:
            host, kept = kept, 0
    extras = 0
    if stage.first and shape.hidden_dropout > 0:
        extras += MASK_BYTES * sbh  # embedding dropout mask
    if stage.last:
        extras += 2 * p * sbh  # final layer norm input and output
    else:
        extras += (
            p * sbh // shape.tensor
        )  # the stage output DeepSpeed's pipeline keeps, split over tensor ranks
    in_flight = shape.in_flight(stage)
    return StageActivations(
        per_layer=layer,
        kept_per_layer=kept / layers,
        kept_per_micro_batch=kept + extras,
        in_flight=in_flight,
        working_set=working,
        loss=loss_peak(shape, p) if stage.last else 0,
        buffer=attention_buffer(shape, p),
        host_checkpoints=host * in_flight,
    )
