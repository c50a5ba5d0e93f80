"""Which file or override set each key of a composed recipe."""

from __future__ import annotations

KeyPath = tuple[str, ...]
Sources = dict[KeyPath, str]


def source_of(sources: Sources, path: KeyPath) -> str:
    """The file or override that set `path` (or its nearest parent), else the schema default."""
    for end in range(len(path), 0, -1):
        if path[:end] in sources:
            return sources[path[:end]]
    return "schema default"
