"""Which file or override set each key of a composed recipe.

Only values are recorded, never a mapping that has keys: a key nobody set is then a schema default
rather than its section's. A value replaced (by a later block, the recipe file or an override) takes
the replacing source with it, whatever it was before (a boolean a block set, replaced by the user's
mapping, is the user's), so that a refusal names the one that set the value in error."""

from __future__ import annotations

from typing import Any

KeyPath = tuple[str, ...]
Sources = dict[KeyPath, str]


def source_of(sources: Sources, path: KeyPath) -> str:
    """The file or override that set `path` (or its nearest parent, or else a key below it: an
    unknown section given as `section.key`, or a mapping given where a value belongs), else the
    schema default."""
    for end in range(len(path), 0, -1):
        if path[:end] in sources:
            return sources[path[:end]]
    for key, source in sources.items():
        if key[: len(path)] == path:
            return source
    return "schema default"


def record(sources: Sources, path: KeyPath, value: Any, source: str) -> None:
    """Record that `source` set `value` at `path`, replacing whatever was there: what an earlier
    source set at or below `path`, and an ancestor recorded as a value (a scalar or an empty mapping)
    that is now a mapping holding `path`, are forgotten. A mapping's keys are recorded, not the
    mapping itself (an empty one is a value)."""
    for end in range(1, len(path)):
        sources.pop(path[:end], None)
    forget(sources, path)
    _record_values(sources, path, value, source)


def forget(sources: Sources, path: KeyPath) -> None:
    """Forget the sources of `path` and of every key below it (its value was replaced or dropped)."""
    for key in [key for key in sources if key[: len(path)] == path]:
        del sources[key]


def _record_values(sources: Sources, path: KeyPath, value: Any, source: str) -> None:
    if isinstance(value, dict) and value:
        for key, child in value.items():
            _record_values(sources, (*path, str(key)), child, source)
    else:
        sources[path] = source
