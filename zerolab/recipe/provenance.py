"""Which file or override set each key of a composed recipe."""

from __future__ import annotations

KeyPath = tuple[str, ...]
Sources = dict[KeyPath, str]


def source_of(sources: Sources, path: KeyPath) -> str:
    """The file or override that set `path` (or its nearest parent, or else a key below it: an
    unknown section given as `section.key`), else the schema default."""
    for end in range(len(path), 0, -1):
        if path[:end] in sources:
            return sources[path[:end]]
    for key, source in sources.items():
        if key[: len(path)] == path:
            return source
    return "schema default"
