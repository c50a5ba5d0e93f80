"""A pretraining's length and checkpoint interval: iterations as given, or converted from tokens
or epochs (a recipe's length, whatever its job kind: zerolab.recipe.job's train_iters).

- `train.tokens`: iterations = ceil(tokens / (global batch x sequence length)).
- `train.samples`: Megatron's own count (samples_in_iterations), with a batch-size ramp-up too.
- `train.epochs`: Megatron builds the training split from the first documents of the
  prepared dataset (its `--split` rule) and cuts their tokens into samples of
  `seq_length + 1` tokens that overlap by one, (tokens - 1) // seq_length per epoch;
  iterations = ceil(epochs x samples per epoch / global batch). This reads PREFIX.idx.
- `train.save_interval_epochs`: the checkpoint interval in epochs of the same training split,
  ceil(epochs x samples per epoch / global batch) iterations (at least 1).
- Fine-tuning (a `finetune` section; zerolab.recipe.finetuning): whole epochs of the task's
  training file, each examples // global batch steps (the loop deals whole batches only); every
  example is padded to seq_length tokens.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING

from zerolab.data_prep.indexed import read_index
from zerolab.errors import UserError
from zerolab.recipe.inputs import blend, prepare_hint
from zerolab.recipe.megatron_split import split_ranges
from zerolab.recipe.schema import Recipe

if TYPE_CHECKING:
    import numpy as np


def pretraining_iters(recipe: Recipe) -> int:
    """The number of optimizer steps a pretraining recipe trains for."""
    train = recipe.train
    if train.iters is not None:
        return train.iters
    tokens_per_iter = train.global_batch_size * recipe.model.seq_length
    if train.tokens is not None:
        return math.ceil(train.tokens / tokens_per_iter)
    if train.samples is not None:
        return samples_in_iterations(train.samples, train.global_batch_size, train.rampup_batch_size)
    if train.epochs is None:
        raise UserError(LENGTH_MISSING)
    return _epochs_in_iterations(recipe, train.epochs, EPOCHS)


LENGTH_MISSING = (
    "give the training length exactly once: as train.iters (iterations), train.tokens, train.samples "
    "or train.epochs"
)
"""The problem of a recipe without a length (zerolab.recipe.checks reports it by its keys)."""


def samples_in_iterations(samples: int, global_batch: int, rampup: tuple[int, int, int] | None) -> int:
    """The iterations Megatron trains for `samples` (its update_train_iters): samples // global
    batch, or with a ramp-up [start, increment, ramp samples] one iteration per batch of the ramp
    (start + increment x int(consumed / (ramp samples / increments))) while the samples consumed
    are at most the ramp's, then what is left // global batch. The checks guarantee a ramp Megatron
    takes (zerolab.recipe.checks: a start below the global batch, which the increments reach)."""
    if rampup is None:
        return samples // global_batch
    start, increment, ramp_samples = rampup
    per_increment = ramp_samples / ((global_batch - start) // increment)
    iterations = consumed = 0
    while consumed <= ramp_samples:
        consumed += start + int(consumed / per_increment) * increment if per_increment else global_batch
        iterations += 1
    return iterations + (samples - consumed) // global_batch


def save_interval(recipe: Recipe) -> int | None:
    """Iterations between checkpoints: train.save_interval, or train.save_interval_epochs in
    iterations; None when the recipe saves none."""
    train = recipe.train
    if train.save_interval_epochs is None:
        return train.save_interval
    return max(1, _epochs_in_iterations(recipe, train.save_interval_epochs, SAVE_INTERVAL_EPOCHS))


EPOCHS = ("train.epochs", "give the length as train.iters or train.tokens")
SAVE_INTERVAL_EPOCHS = ("train.save_interval_epochs", "give the interval as train.save_interval (iterations)")
"""The keys given in epochs, and the fix that needs no data: for the errors."""


def _epochs_in_iterations(recipe: Recipe, epochs: float, asked_by: tuple[str, str]) -> int:
    """`epochs` passes over the training split, in iterations (rounded up)."""
    key, fix = asked_by
    samples = (pretraining_split_tokens(recipe, asked_by) - 1) // recipe.model.seq_length
    if samples < 1:
        raise UserError(
            f"{key}: the training split of {recipe.data.path or recipe.data.train_path} holds fewer than "
            f"{recipe.model.seq_length + 1} tokens, not one sample; use more data, or {fix}"
        )
    return math.ceil(epochs * samples / recipe.train.global_batch_size)


def pretraining_split_tokens(recipe: Recipe, asked_by: tuple[str, str] = EPOCHS) -> int:
    """Tokens in a pretraining's training split: data.split's leading documents of data.path, or the
    whole of data.train_path (needs its PREFIX.idx). `asked_by` is the key that needs them and the
    fix without data, for the error when the data is missing."""
    asking, fix = asked_by
    key = "path" if recipe.data.path is not None else "train_path"
    path = getattr(recipe.data, key)
    if blend(path) is not None:
        raise UserError(
            f"{asking} counts the training split of one prepared dataset, and data.{key} is a blend "
            f"({path!r}), whose samples Megatron draws by weight; {fix}"
        )
    idx = Path(path + ".idx")
    if not idx.is_file():
        raise UserError(
            f"{asking} needs the prepared dataset to count its tokens, and {path}.idx is missing "
            f"(data.{key}): {prepare_hint(recipe, key)}, or {fix}"
        )
    sizes = document_sizes(idx)
    if key == "train_path":
        return int(sizes.sum())
    return int(sizes[: train_documents(recipe.data.split, len(sizes))].sum())


def train_documents(split: str, documents: int) -> int:
    """How many leading documents Megatron's `--split` weights give the training split."""
    try:
        return split_ranges(split, documents)[0][1]
    except ValueError:
        raise UserError(f"data.split={split!r}: the weights must not all be 0") from None


def document_sizes(idx: Path) -> np.ndarray:
    """Token counts per document from a Megatron MMIDIDX index file."""

    try:
        return read_index(idx).sizes.astype("int64")
    except ValueError as error:
        raise UserError(f"{error}; prepare the data again") from None
