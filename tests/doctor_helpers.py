"""Reading what `zerolab doctor` prints."""

from __future__ import annotations


def table_rows(text: str) -> dict[str, str]:
    """The report's table, row name -> value (printed wide enough not to wrap)."""
    return {
        cells[1].strip(): cells[2].strip() for line in text.splitlines() if len(cells := line.split("│")) == 4
    }
