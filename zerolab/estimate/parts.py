"""A part of the memory estimate: what it is, its size on one rank, where it lives and in
which phases of a training step it is allocated."""

from __future__ import annotations

from dataclasses import dataclass

GIB = 2**30

FORWARD, BACKWARD, STEP = "end of forward", "backward", "optimizer step"
PHASES = (FORWARD, BACKWARD, STEP)
ALWAYS = frozenset(PHASES)


@dataclass(frozen=True)
class Part:
    """`bytes` of `name` on one rank, on the GPU or the host, present in `phases`; `how` says how
    it was counted (shown to the user)."""

    key: str
    name: str
    bytes: float
    how: str
    phases: frozenset[str] = ALWAYS
    host: bool = False

    @property
    def gib(self) -> float:
        """The size in GiB."""
        return self.bytes / GIB


def during(*phases: str) -> frozenset[str]:
    """The phases a part is allocated in."""
    return frozenset(phases)
