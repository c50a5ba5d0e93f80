"""A run's name: the recipe file's stem, then each override that changes what the run measures
(`gpt2_z3+zero=z2+precision=fp16`), so that a run directory under logs/NAME/ and every summary
row say what ran. Overrides of where the run reads or reports (data paths, the rendezvous,
W&B: schema fields declared `names_run=False`) stay out."""

from __future__ import annotations

import hashlib
import re

from pydantic import BaseModel

from zerolab.recipe.schema import Recipe, section_class

MAX_LENGTH = 128
"""Longer names keep their start and end in a hash (file systems allow 255 bytes a name)."""

_UNSAFE = re.compile(r"[^A-Za-z0-9._,=+-]+")
_OVERRIDE_START = re.compile(r"\+(?=[A-Za-z_][A-Za-z0-9_.]*=)")
"""Where a name's next `+key=value` part starts."""


def run_name(stem: str, overrides: tuple[str, ...] | list[str]) -> str:
    """`stem` and the overrides that name the run, joined by `+`, made safe as a directory name."""
    shown = [_UNSAFE.sub("_", override.strip()).strip("_") for override in overrides if _names_run(override)]
    name = "+".join([stem, *shown])
    if len(name) <= MAX_LENGTH:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:8]
    return f"{name[: MAX_LENGTH - len(digest) - 1]}~{digest}"


def renamed(name: str, overrides: tuple[str, ...] | list[str]) -> str:
    """A resumed run's name: the earlier run's `name` with each of `overrides` that names the run
    in place of the part for the same key, or added (`tiny_z1+train.iters=20` resumed with
    `train.iters=40` is `tiny_z1+train.iters=40`)."""
    parts = _OVERRIDE_START.split(name)
    stem, given = parts[0], parts[1:]
    keys = {override.partition("=")[0].strip() for override in overrides if _names_run(override)}
    kept = [part for part in given if part.partition("=")[0] not in keys]
    return run_name(stem, [*kept, *overrides])


def _names_run(override: str) -> bool:
    """Whether the override's key (a section, or a field at any depth) names the run."""
    path = override.partition("=")[0].strip().split(".")
    model: type[BaseModel] = Recipe
    for part in path:
        info = model.model_fields.get(part)
        if info is None:
            return True
        if (info.json_schema_extra or {}).get("names_run") is False:  # type: ignore[union-attr]
            return False
        section = section_class(info.annotation)
        if section is None:
            return True
        model = section
    return True
