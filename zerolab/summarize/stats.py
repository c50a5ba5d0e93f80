"""Steady-state statistics: which logged intervals count as warm-up, and the median
and 10th-90th percentile spread of a metric over the rest."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np

from zerolab.errors import UserError


@dataclass(frozen=True)
class Warmup:
    """Warm-up: a fraction of the iterations done, or a fixed iteration count; the first
    logged interval is always warm-up too (it holds start-up and compilation time)."""

    fraction: float | None = 0.1
    iterations: int | None = None

    @classmethod
    def parse(cls, text: str) -> Warmup:
        """`10%` or `0.1` (fraction of the iterations done) or `50` (iterations 1..50)."""
        value = text.strip()
        match = re.fullmatch(r"(\d+(?:\.\d+)?)%", value)
        if match and float(match.group(1)) < 100:
            return cls(fraction=float(match.group(1)) / 100)
        if re.fullmatch(r"0?\.\d+|0", value):
            return cls(fraction=float(value))
        if re.fullmatch(r"\d+", value):
            return cls(fraction=None, iterations=int(value))
        raise UserError(
            f"--warmup {text!r}: give a fraction of the iterations ('10%' or '0.1') "
            "or an iteration count ('50')"
        )

    def describe(self) -> str:
        """The rule in words, for the output."""
        rule = (
            f"the first {self.fraction:.0%} of iterations"
            if self.fraction is not None
            else (f"iterations 1-{self.iterations}")
        )
        return f"warm-up excluded: {rule}, and at least the first logged interval"

    def cutoff(self, iterations: list[float]) -> float:
        """Iterations <= the cutoff are warm-up."""
        if not iterations:
            return 0.0
        limit = self.fraction * max(iterations) if self.fraction is not None else float(self.iterations or 0)
        return max(limit, min(iterations))


@dataclass(frozen=True)
class Spread:
    """Median and 10th/90th percentiles of a metric over `n` intervals."""

    median: float
    p10: float
    p90: float
    n: int


def spread(values: list[float]) -> Spread | None:
    """The spread of the finite `values`; None when there are none."""
    finite = [v for v in values if math.isfinite(v)]
    if not finite:
        return None
    p10, median, p90 = np.percentile(finite, [10, 50, 90])
    return Spread(float(median), float(p10), float(p90), len(finite))
