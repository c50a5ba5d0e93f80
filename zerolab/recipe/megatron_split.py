"""Megatron's --split, as the pinned engine reads it (megatron/data/dataset_utils.py
get_train_valid_test_split_): weights separated by commas, or else by slashes, each a number
(spaces around it allowed: `969, 30, 1`), the first three read and the missing ones 0; a dataset's
documents dealt into train, validation and test in proportion, in order. The schema's check of
data.split, the training length and the evaluation all read it here."""

from __future__ import annotations

import itertools

WEIGHT = r"\s*\d+(?:\.\d*)?\s*"
SPLIT_PATTERN = rf"^{WEIGHT}(?:(?:,{WEIGHT})*|(?:/{WEIGHT})+)$"
"""The forms of --split the engine reads: `98,2,0`, `969, 30, 1`, `0.9,0.1`, `90/10`, `100`."""


def split_weights(split: str) -> list[float]:
    """The train, validation and test weights of `split` (SPLIT_PATTERN), as the engine reads them:
    split at commas, else at slashes, the first three, padded with 0."""
    separator = "," if "," in split else "/"
    weights = [float(part) for part in split.split(separator)][:3]
    return weights + [0.0] * (3 - len(weights))


def split_ranges(split: str, documents: int) -> list[tuple[int, int]]:
    """The document ranges [first, end) of train, validation and test that the engine deals
    `documents` into (ValueError when the weights are all 0, which the engine asserts against)."""
    weights = split_weights(split)
    total = sum(weights)
    if total <= 0:
        raise ValueError(f"the weights of --split {split!r} are all 0")
    bounds = [0]
    for weight in weights:
        bounds.append(bounds[-1] + round(weight / total * float(documents)))
    excess = bounds[-1] - documents
    bounds = [0] + [bound - excess for bound in bounds[1:]]
    return list(itertools.pairwise(bounds))
