"""The pinned training stack, read from pins.toml (the single place versions live)."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

PINS_FILE = Path(__file__).resolve().parent / "pins.toml"


@dataclass(frozen=True)
class Pins:
    """The engine's git source and commit, the pip pins of its environment, and apex's git
    source and commit (built on CUDA machines without it)."""

    engine_repo: str
    engine_commit: str
    python: dict[str, str]
    apex_repo: str
    apex_commit: str

    def requirements(self, *, without: tuple[str, ...] = ()) -> list[str]:
        """pip requirement lines (`name==version`), leaving out the names in `without`."""
        return [f"{name}=={version}" for name, version in self.python.items() if name not in without]


@lru_cache(maxsize=1)
def load_pins() -> Pins:
    """Read pins.toml."""
    data = tomllib.loads(PINS_FILE.read_text())
    return Pins(
        engine_repo=data["engine"]["repo"],
        engine_commit=data["engine"]["commit"],
        python=dict(data["python"]),
        apex_repo=data["apex"]["repo"],
        apex_commit=data["apex"]["commit"],
    )


if __name__ == "__main__":  # `make lock`: pins.toml's pins, as the locks' constraints
    print("\n".join(load_pins().requirements()))
