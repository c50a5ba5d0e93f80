"""How two resolved recipes and their renders differ."""

from __future__ import annotations

import json
from typing import Any

from zerolab.recipe.render import Launch
from zerolab.recipe.schema import Recipe

ABSENT = "(absent)"


def flatten(data: Any, prefix: str = "") -> dict[str, Any]:
    """Nested mappings as {"a.b.c": value}."""
    if not isinstance(data, dict):
        return {prefix: data}
    flat: dict[str, Any] = {}
    for key, value in data.items():
        flat.update(flatten(value, f"{prefix}.{key}" if prefix else str(key)))
    return flat


def option_map(args: list[str]) -> dict[str, Any]:
    """Command-line options as {"--name": value}; flags map to True, positionals to their index."""
    options: dict[str, Any] = {}
    for index, token in enumerate(args):
        if token.startswith("-"):
            options[token] = True
        elif index and args[index - 1].startswith("-"):
            options[args[index - 1]] = token
        else:
            options[f"argument {index}"] = token
    return options


def changes(a: dict[str, Any], b: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    """(key, value in a, value in b) for every key whose values differ, in a's order then b's."""
    keys = list(a) + [key for key in b if key not in a]
    return [
        (key, a.get(key, ABSENT), b.get(key, ABSENT))
        for key in keys
        if a.get(key, ABSENT) != b.get(key, ABSENT)
    ]


def diff_recipes(
    a: Recipe, launch_a: Launch, b: Recipe, launch_b: Launch
) -> dict[str, list[tuple[str, Any, Any]]]:
    """Differences by part: recipe keys, launcher and Megatron arguments, environment, ds_config."""
    return {
        "recipe": changes(flatten(a.model_dump(mode="json")), flatten(b.model_dump(mode="json"))),
        "arguments": changes(option_map(launch_a.argv), option_map(launch_b.argv)),
        "env": changes(launch_a.env, launch_b.env),
        "ds_config": changes(flatten(launch_a.ds_config), flatten(launch_b.ds_config)),
    }


def format_diff(name_a: str, name_b: str, parts: dict[str, list[tuple[str, Any, Any]]]) -> str:
    """The differences as text, one `key: a -> b` line each; says so when there are none."""
    lines = [f"--- {name_a}", f"+++ {name_b}"]
    for part, rows in parts.items():
        if rows:
            lines.append(f"{part}:")
            lines += [f"  {key}: {_show(old)} -> {_show(new)}" for key, old, new in rows]
    if len(lines) == 2:
        lines.append("no differences")
    return "\n".join(lines)


def _show(value: Any) -> str:
    return ABSENT if value == ABSENT else json.dumps(value)
