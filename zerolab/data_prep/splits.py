"""Fixed train/valid/test splits dealt in a streaming, worker-independent order."""

from __future__ import annotations

import numpy as np

from zerolab.errors import UserError

SPLIT_NAMES = ("train", "valid", "test")


def parse_split(text: str) -> tuple[int, ...]:
    """'98,1,1' -> (98, 1, 1): whole, non-negative weights for train, valid, test."""
    try:
        weights = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise UserError(f"--split {text!r}: give whole numbers such as 98,1,1") from None
    if not 1 <= len(weights) <= 3 or min(weights) < 0 or sum(weights) == 0:
        raise UserError(
            f"--split {text!r}: give one to three non-negative weights (train,valid,test), e.g. 98,1,1"
        )
    return weights


def deal_pattern(weights: tuple[int, ...]) -> np.ndarray:
    """Which split each document of a period of sum(weights) goes to (smooth weighted
    round-robin): document i goes to split pattern[i % len(pattern)], so proportions are
    exact every period and never depend on the corpus size or the worker count."""
    total = sum(weights)
    current = [0] * len(weights)
    pattern = []
    for _ in range(total):
        current = [c + w for c, w in zip(current, weights, strict=True)]
        chosen = max(range(len(weights)), key=lambda k: current[k])
        current[chosen] -= total
        pattern.append(chosen)
    return np.array(pattern, dtype=np.int64)
