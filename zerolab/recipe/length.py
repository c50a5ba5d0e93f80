"""Training length: iterations as given, or converted from tokens or epochs.

- `train.tokens`: iterations = ceil(tokens / (global batch x sequence length)).
- `train.epochs`: Megatron builds the training split from the first documents of the
  prepared dataset (its `--split` rule) and cuts their tokens into samples of
  `seq_length + 1` tokens that overlap by one, (tokens - 1) // seq_length per epoch;
  iterations = ceil(epochs x samples per epoch / global batch). This reads PREFIX.idx.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING

from zerolab.errors import UserError
from zerolab.recipe.schema import Recipe

if TYPE_CHECKING:
    import numpy as np


def train_iters(recipe: Recipe) -> int:
    """The number of optimizer steps the recipe trains for."""
    train = recipe.train
    if train.iters is not None:
        return train.iters
    tokens_per_iter = train.global_batch_size * recipe.model.seq_length
    if train.tokens is not None:
        return math.ceil(train.tokens / tokens_per_iter)
    assert train.epochs is not None, "checks guarantee one training length"
    samples = (train_split_tokens(recipe) - 1) // recipe.model.seq_length
    if samples < 1:
        raise UserError(
            f"train.epochs: the training split of {recipe.data.path or recipe.data.train_path} holds "
            "fewer than "
            f"{recipe.model.seq_length + 1} tokens, not one sample; use more data or train.iters"
        )
    return math.ceil(train.epochs * samples / train.global_batch_size)


def train_split_tokens(recipe: Recipe) -> int:
    """Tokens in the training split: data.split's leading documents of data.path, or the whole
    of data.train_path (needs its PREFIX.idx)."""
    key = "path" if recipe.data.path is not None else "train_path"
    path = getattr(recipe.data, key)
    idx = Path(path + ".idx")
    if not idx.is_file():
        raise UserError(
            f"train.epochs needs the prepared dataset to count its tokens, and {path}.idx is missing "
            f"(data.{key}): prepare it first, or give the length as train.iters or train.tokens"
        )
    sizes = document_sizes(idx)
    if key == "train_path":
        return int(sizes.sum())
    return int(sizes[: train_documents(recipe.data.split, len(sizes))].sum())


def train_documents(split: str, documents: int) -> int:
    """How many leading documents Megatron's `--split` weights give the training split."""
    weights = [float(part) for part in split.split(",")]
    weights += [0.0] * (3 - len(weights))
    total = sum(weights)
    if total <= 0:
        raise UserError(f"data.split={split!r}: the weights must not all be 0")
    ends = [0]
    for weight in weights:
        ends.append(ends[-1] + round(weight / total * documents))
    excess = ends[-1] - documents
    return ends[1] - excess


def document_sizes(idx: Path) -> np.ndarray:
    """Token counts per document from a Megatron MMIDIDX index file."""
    from zerolab.data_prep.indexed import read_index

    try:
        return read_index(idx).sizes.astype("int64")
    except ValueError as error:
        raise UserError(f"{error}; prepare the data again") from None
