"""The model as one rank holds it: Megatron's GPT-2 (learned positions, tied output layer)
split across tensor and pipeline ranks, and the per-micro-batch sizes the memory terms use."""

from __future__ import annotations

from dataclasses import dataclass

from zerolab.finetune.glue import glue_task
from zerolab.recipe.schema import Recipe


def attention_kind(recipe: Recipe) -> str:
    """The recipe's attention kind: `megatron` materializes the seq x seq scores, `flash` and `sdpa`
    do not."""
    return recipe.model.attention


@dataclass(frozen=True)
class Stage:
    """One pipeline stage as one of its ranks holds it."""

    index: int
    layers: int
    params: int
    first: bool
    last: bool


def finetune_labels(recipe: Recipe) -> int | None:
    """A fine-tuning's label count (its GLUE task's), else None."""
    return glue_task(recipe.finetune.task).num_labels if recipe.finetune else None


@dataclass(frozen=True)
class Shape:
    """Sizes of the model, the micro batch and the parallel layout (counts, not bytes)."""

    layers: int
    hidden: int
    heads: int
    ffn: int
    seq: int
    micro_batch: int
    vocab: int
    positions: int
    tensor: int
    pipeline: int
    data: int
    accumulation: int
    sequence: int
    attention: str
    attention_dropout: float
    hidden_dropout: float
    outputs: int
    """Logits per token: the vocabulary for pretraining; a fine-tuning's labels (its classification
    head replaces the language-model head)."""
    mics_shard: int | None = None
    """MiCS's shard (zero.mics_shard_size): the ranks the model states are partitioned over."""

    @classmethod
    def of(cls, recipe: Recipe) -> Shape:
        """The shape of a loaded recipe (Megatron's default MLP: ffn = 4 x hidden)."""
        model = recipe.model
        return cls(
            layers=model.num_layers,
            hidden=model.hidden_size,
            heads=model.num_attention_heads,
            ffn=4 * model.hidden_size,
            seq=model.seq_length,
            micro_batch=recipe.train.micro_batch_size,
            vocab=recipe.padded_vocab_size,
            positions=model.max_position_embeddings,
            tensor=recipe.parallel.tensor,
            pipeline=recipe.parallel.pipeline,
            data=recipe.data_parallel_size,
            accumulation=recipe.gradient_accumulation_steps,
            sequence=recipe.parallel.sequence,
            attention=attention_kind(recipe),
            attention_dropout=model.attention_dropout,
            hidden_dropout=model.hidden_dropout,
            outputs=finetune_labels(recipe) or recipe.padded_vocab_size,
            mics_shard=recipe.zero.mics_shard_size if recipe.zero.stage == 3 else None,
        )

    @property
    def tokens(self) -> int:
        """s x b / sequence: the tokens of one micro batch a rank holds (DeepSpeed-Ulysses splits
        each sequence across parallel.sequence ranks; in attention, each rank holds the whole
        sequence for heads / sequence of the heads, the same count of scores)."""
        return self.seq * self.micro_batch // self.sequence

    @property
    def reduce_ranks(self) -> int:
        """The ranks gradients are reduced over: data x sequence parallel (Megatron-DeepSpeed hands
        DeepSpeed its sequence-data-parallel group)."""
        return self.data * self.sequence

    @property
    def zero_ranks(self) -> int:
        """The ranks ZeRO partitions the model states over: all of reduce_ranks, or MiCS's shard."""
        return self.mics_shard or self.reduce_ranks

    def layer_params(self) -> int:
        """Weights of one transformer layer on one tensor rank: QKV, projection and MLP matrices
        and their split biases divided by t; the projection and fc2 biases and both layer norms whole."""
        h, f, t = self.hidden, self.ffn, self.tensor
        return (4 * h * h + 2 * h * f + 3 * h + f) // t + 6 * h

    def embedding_params(self) -> int:
        """Word embeddings (vocabulary split across tensor ranks) and learned positions (whole)."""
        return self.vocab // self.tensor * self.hidden + self.positions * self.hidden

    def total_params(self) -> int:
        """Weights of one model replica, each counted once (no tensor or pipeline copies)."""
        h, f = self.hidden, self.ffn
        per_layer = 4 * h * h + 2 * h * f + 3 * h + f + 6 * h
        return self.layers * per_layer + (self.vocab + self.positions) * h + 2 * h

    def stages(self) -> list[Stage]:
        """Each pipeline stage: L/pp layers; the first holds the embeddings; the last the final layer
        norm and, with pp > 1, its own copy of the embeddings for the tied output layer (DeepSpeed's
        pipeline engine ties them across the first and last stage)."""
        per_stage = self.layers // self.pipeline
        result = []
        for index in range(self.pipeline):
            first, last = index == 0, index == self.pipeline - 1
            params = per_stage * self.layer_params()
            if first or last:
                params += self.embedding_params()
            if last:
                params += 2 * self.hidden
            result.append(Stage(index, per_stage, params, first, last))
        return result

    def largest_param(self) -> int:
        """Elements of the largest single weight on a rank: the word embedding, or the MLP matrix."""
        return max(self.vocab // self.tensor * self.hidden, self.hidden * self.ffn // self.tensor)

    def small_params_per_layer(self) -> int:
        """Biases and layer-norm weights of one layer (below ZeRO-3's persistence threshold)."""
        return (3 * self.hidden + self.ffn) // self.tensor + 6 * self.hidden

    def in_flight(self, stage: Stage) -> int:
        """Micro batches whose activations a stage holds at once: DeepSpeed's 1F1B schedule keeps
        min(stages - stage index, micro batches per step) of them; one without pipelining."""
        return min(self.pipeline - stage.index, self.accumulation)
