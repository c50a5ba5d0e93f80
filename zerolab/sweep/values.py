"""How a swept value is written: in tables, plots and cell names, as YAML spells it."""

from __future__ import annotations

from typing import Any

import yaml


def value_text(value: Any) -> str:
    """A swept value as text: a string as it is, anything else as YAML writes it (2, 0.0001, true)."""
    if isinstance(value, str):
        return value
    return yaml.safe_dump(value, default_flow_style=True).removesuffix("\n...\n").strip()


def is_number(value: Any) -> bool:
    """Whether a swept value is a number (an int or float, not a bool)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)
