"""Compose a recipe: building blocks from `base:` merged in order, then the recipe's own
keys, then `key.path=value` overrides; validate against the schema and run the checks.
Every key remembers which file (or override) set it, so errors can name it."""

from __future__ import annotations

import difflib
import re
import typing
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from zerolab.errors import UserError
from zerolab.locations import CONFIGS_DIR, RECIPES_DIR, display_path
from zerolab.recipe.checks import check_recipe
from zerolab.recipe.job import job_of
from zerolab.recipe.naming import run_name
from zerolab.recipe.provenance import KeyPath, Sources, record, source_of
from zerolab.recipe.schema import MODEL_SHAPE_KEYS, SECTIONS, Recipe, section_at
from zerolab.recipe.yaml_io import parse_yaml, read_yaml_mapping

_OVERRIDE_KEY = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")


def resolve_recipe_path(spec: str | Path) -> Path:
    """The recipe file for `spec`: a path, or a name under recipes/ (`gpt2_z1`, `cpu/tiny_z1.yaml`)."""
    given = Path(spec)
    candidates = [given, RECIPES_DIR / given, RECIPES_DIR / given.with_suffix(".yaml")]
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    for candidate in candidates[:2]:
        if candidate.is_dir():
            raise UserError(_a_directory(spec, candidate))
    known = sorted(str(p.relative_to(RECIPES_DIR).with_suffix("")) for p in RECIPES_DIR.rglob("*.yaml"))
    close = difflib.get_close_matches(given.stem, known, n=1)
    hint = f"; did you mean `{close[0]}`?" if close else f"; shipped recipes: {', '.join(known)}"
    raise UserError(f"{spec}: no such recipe file{hint}")


def _a_directory(spec: str | Path, directory: Path) -> str:
    """The refusal of a directory given as a recipe: the recipes inside it, as each can be named (a
    shipped one by its name under recipes/, another by its path)."""
    inside = sorted(directory.rglob("*.yaml"))
    if not inside:
        return f"{spec}: a directory, not a recipe file, and it holds no recipe (*.yaml); name a recipe file"
    shipped = RECIPES_DIR.resolve()

    def named(path: Path) -> str:
        resolved = path.resolve()
        if resolved.is_relative_to(shipped):
            return str(resolved.relative_to(shipped).with_suffix(""))
        return str(path)

    names = [named(path) for path in inside]
    return (
        f"{spec}: a directory, not a recipe file; name a recipe in it, e.g. `{names[0]}` "
        f"({len(names)} there: {', '.join(names)})"
    )


def load_recipe(
    path: str | Path,
    overrides: tuple[str, ...] | list[str] = (),
    *,
    name: str | None = None,
    path_shown: str | None = None,
) -> Recipe:
    """Compose, validate and check the recipe at `path` with `overrides` (`key.path=value`).
    The recipe's name is the file's stem with the overrides that change the run (zerolab.recipe.naming)
    and its path the file, unless `name` and `path_shown` say
    otherwise (a resumed run's recipe.yaml is that run's recipe).

    Raises UserError naming the file and key for anything wrong.
    """
    recipe_file = resolve_recipe_path(path)
    merged, sources = compose(recipe_file, overrides)
    recipe = validate(merged, sources)
    recipe.model.name = model_name(recipe)
    job_of(recipe).adopt_model(sources)
    recipe._name = name or run_name(recipe_file.stem, overrides)
    recipe._path = path_shown or display_path(recipe_file)
    recipe._overrides = tuple(overrides)
    problems = check_recipe(recipe, sources=sources)
    if problems:
        raise RecipeProblems(recipe, [problem.describe(recipe, sources) for problem in problems])
    return recipe


class RecipeProblems(UserError):
    """A recipe that composed and validated but failed the checks across keys; `recipe` is it,
    unchecked (`zerolab show` still prints it), `described` its problems, each as message lines."""

    def __init__(self, recipe: Recipe, described: list[str]) -> None:
        lines = [f"{recipe.path}: {len(described)} problem(s) found before launch:", *described]
        super().__init__("\n".join(lines))
        self.recipe = recipe
        self.described = described

    def adding(self, more: list[str]) -> RecipeProblems:
        """These problems and `more` (one line each: what else keeps the recipe from launching here)."""
        return RecipeProblems(self.recipe, [*self.described, *(f"- {problem}" for problem in more)])


def model_name(recipe: Recipe) -> str:
    """model.name, followed by each shape key whose value differs from the building block of that
    name (`gpt2-tiny+num_layers=4+hidden_size=128`), so that run.json, summaries and estimates never
    call a changed shape by the block's name."""
    model = recipe.model
    block = CONFIGS_DIR / "model" / f"{model.name}.yaml"
    if not block.is_file():
        return model.name
    shape = read_yaml_mapping(block).get("model", {})
    changed = [
        f"{key}={getattr(model, key)}"
        for key in MODEL_SHAPE_KEYS
        if key in shape and shape[key] != getattr(model, key)
    ]
    return "+".join([model.name, *changed])


def model_name_of_shape(shape: dict[str, int | None]) -> str | None:
    """The configs/model/ block whose shape keys equal every one `shape` states (`gpt2-124m`), else
    `gpt-12L-768h`; None without the number of layers and the hidden size. For runs known only by
    their log."""
    layers, hidden = shape.get("num_layers"), shape.get("hidden_size")
    if layers is None or hidden is None:
        return None
    stated = {key: value for key, value in shape.items() if key in MODEL_SHAPE_KEYS and value is not None}
    for block in sorted((CONFIGS_DIR / "model").glob("*.yaml")):
        model = read_yaml_mapping(block).get("model", {})
        if all(model.get(key) == value for key, value in stated.items()):
            return str(model.get("name", block.stem))
    return f"gpt-{layers}L-{hidden}h"


def compose(recipe_file: Path, overrides: tuple[str, ...] | list[str] = ()) -> tuple[dict[str, Any], Sources]:
    """The merged, not yet validated recipe mapping, and the source of every key."""
    own = read_yaml_mapping(recipe_file)
    where = display_path(recipe_file)
    if not own:
        raise UserError(
            f"{where} is empty: a recipe lists its building blocks under `base:` (configs/) and its own "
            "settings; start from a shipped one, e.g. a copy of recipes/cpu/tiny_z1.yaml"
        )
    base = own.get("base", [])
    if not isinstance(base, list) or not all(isinstance(entry, str) for entry in base):
        raise UserError(f"{where}: `base` must be a list of building blocks such as `model/gpt2-1.5b`")
    merged: dict[str, Any] = {}
    sources: Sources = {}
    refused: list[str] = []  # every block and override that cannot be merged, reported together
    for entry in base:
        try:
            block_file = _block_file(entry, f"{where}: base")
            block = read_yaml_mapping(block_file)
            if "base" in block:
                raise UserError(f"{display_path(block_file)}: a building block cannot have its own `base`")
        except UserError as error:
            refused.append(str(error))
            continue
        deep_merge(merged, block, display_path(block_file), sources)
    deep_merge(merged, own, where, sources)
    for override in overrides:
        try:
            apply_override(merged, override, sources)
        except UserError as error:
            refused.append(str(error))
    if refused:
        raise UserError("\n".join(refused))
    return merged, sources


def apply_override(merged: dict[str, Any], override: str, sources: Sources) -> None:
    """Apply `key.path=value` (value read as YAML) or `SECTION=NAME` (merge configs/SECTION/NAME.yaml)."""
    key, sep, text = override.partition("=")
    key = key.strip()
    if not sep or not _OVERRIDE_KEY.match(key):
        raise UserError(
            f"override `{override}`: write overrides as key.path=value, e.g. train.micro_batch_size=4"
        )
    source = f"override `{override}`"
    if key == "base":
        raise UserError(
            f"{source}: `base` cannot be overridden; merge a block with SECTION=NAME, e.g. model=gpt2-355m"
        )
    value = parse_yaml(text, source, numbered=False)
    if key in SECTIONS and isinstance(value, str):
        block_file = _block_file(f"{key}/{value}", source)
        _drop_block_keys(merged, sources, key)
        kept = [entry for entry in merged.get("base", []) if not entry.startswith(f"{key}/")]
        merged["base"] = [*kept, f"{key}/{value}"]
        deep_merge(merged, read_yaml_mapping(block_file), f"{display_path(block_file)} ({source})", sources)
        return
    path = tuple(key.split("."))
    node = merged
    for part in path[:-1]:
        if not isinstance(node.get(part), dict):
            node[part] = {}
        node = node[part]
    node[path[-1]] = value
    record(sources, path, value, source)


def _drop_block_keys(merged: dict[str, Any], sources: Sources, section: str) -> None:
    """Take out of `merged` every key that a building block of `section` (configs/SECTION/) set,
    so that a swapped-in block replaces the one before it rather than merging over it; keys the
    recipe or an override set stay, and a mapping left empty goes."""
    block_dir = f"{display_path(CONFIGS_DIR / section)}/"

    def drop(node: dict[str, Any], prefix: KeyPath) -> None:
        for key in list(node):
            path = (*prefix, str(key))
            if isinstance(node[key], dict) and node[key]:
                drop(node[key], path)
                if not node[key]:
                    del node[key]
            elif sources.get(path, "").startswith(block_dir):
                del node[key], sources[path]

    node = merged.get(section)
    if isinstance(node, dict):
        drop(node, (section,))
        if not node:
            del merged[section]


def override_problem(override: str) -> str | None:
    """Why `key.path=value` is not a valid override on its own, or None when it is: the key and its
    value against the schema (type, constraints; for `SECTION=NAME`, the building blocks), as
    applying it to any recipe would judge them. The cross-key checks are not run: they depend on
    the rest of the recipe."""
    merged: dict[str, Any] = {}
    sources: Sources = {}
    try:
        apply_override(merged, override, sources)
        validate(merged, sources)
    except UserError as error:
        return str(error)
    return None


def deep_merge(
    target: dict[str, Any], update: dict[str, Any], source: str, sources: Sources, prefix: KeyPath = ()
) -> None:
    """Merge `update` into `target`: mappings merge key by key, anything else replaces."""
    for key, value in update.items():
        path = (*prefix, str(key))
        if isinstance(value, dict) and isinstance(target.get(key), dict):
            deep_merge(target[key], value, source, sources, path)
        else:
            target[key] = _copy(value)
            record(sources, path, value, source)


def validate(merged: dict[str, Any], sources: Sources) -> Recipe:
    """The schema-checked Recipe; errors name the key, its source and, for unknown keys, the likely one."""
    nul = _first_nul(merged)
    if nul is not None:
        raise UserError(
            f"{source_of(sources, nul)}: `{'.'.join(nul)}` contains a NUL character (\\0); "
            "no recipe value can hold one: remove it"
        )
    try:
        return Recipe.model_validate(merged)
    except ValidationError as error:
        messages = [_describe_error(item, sources) for item in error.errors()]
        raise UserError("\n".join(messages)) from None


MOVED_KEYS: dict[KeyPath, str] = {
    ("train", "activation_checkpointing"): "use the activation_checkpointing section instead, e.g. "
    "`activation_checkpointing=full` (docs/recipe-reference.md)",
}
"""Keys of earlier recipes and where their setting lives now."""


def _describe_error(item: dict[str, Any], sources: Sources) -> str:
    loc = tuple(str(part) for part in item["loc"])
    key = ".".join(loc)
    where = source_of(sources, loc)
    if item["type"] == "extra_forbidden":
        if loc in MOVED_KEYS:
            return f"{where}: `{key}` has moved: {MOVED_KEYS[loc]}"
        return f"{where}: unknown key `{key}`; {_suggest(loc)}"
    shown = item.get("input")
    if loc[:2] == ("extra", "megatron_args") and len(loc) == 3 and item["type"] == "string_type":
        return (
            f"{where}: `{key}` = {shown!r}: YAML read this token as a {type(shown).__name__}, and each "
            f"token is passed to Megatron as text: quote it, e.g. '{shown}'"
        )
    if isinstance(shown, dict) and section_at(loc) is None and loc[:2] != ("extra", "ds_config"):
        return f"{where}: `{key}` = {shown!r}: {item['msg']}; {_one_value_hint(key, shown, where)}"
    if item["type"] == "literal_error" and isinstance(shown, str):
        close = difflib.get_close_matches(shown, _literal_values(loc), n=1)
        if close:
            return f"{where}: `{key}` = {shown!r}: {item['msg']}; did you mean `{close[0]}`?"
    return f"{where}: `{key}` = {shown!r}: {item['msg']}"


def _one_value_hint(key: str, given: dict[str, Any], where: str) -> str:
    """The fix for a mapping given where a recipe key takes one value, as DeepSpeed's config writes
    its switches (`bf16: {enabled: true}`, `offload_optimizer: {device: cpu}`), written as `where`
    (a file or an override) takes it."""

    def written(value: str) -> str:
        return f"`{key}={value}`" if where.startswith("override `") else f"`{key}: {value}`"

    one_value = "a recipe key takes one value, not DeepSpeed's mapping: write"
    if "enabled" in given:
        return f"{one_value} {written(_yaml_scalar(given['enabled']))}"
    if "device" in given:
        offloaded = str(given["device"]).lower() not in ("none", "null", "false")
        return (
            f"{one_value} {written(_yaml_scalar(offloaded))} (zerolab renders DeepSpeed's `device: cpu` "
            "from it, and `pin_memory` from zero.pin_memory)"
        )
    return (
        f"a recipe key takes one value here, not a mapping: write {written('VALUE')} "
        "(docs/recipe-reference.md)"
    )


def _yaml_scalar(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) or value is None else str(value)


def _literal_values(loc: KeyPath) -> list[str]:
    """The values a Literal field at `loc` takes (for a did-you-mean)."""
    section = section_at(loc[:-1])
    info = section.model_fields.get(loc[-1]) if section else None
    return [str(value) for value in typing.get_args(info.annotation)] if info else []


def _suggest(loc: KeyPath) -> str:
    """'did you mean `train.micro_batch_size`?' or the list of valid keys at that level."""
    parent = loc[:-1]
    model = section_at(parent)
    if model is None:
        return "this key takes no sub-keys"
    names = list(model.model_fields)
    wrong = loc[-1]
    close = sorted(name for name in names if name.startswith(wrong))[:3]
    close = close or difflib.get_close_matches(wrong, names, n=1, cutoff=0.6)
    close = close or [name for name in names if wrong.startswith(name)][:1]
    if close:
        return "did you mean " + " or ".join(f"`{'.'.join((*parent, name))}`" for name in close) + "?"
    return f"valid keys here: {', '.join(names)}"


def _block_file(entry: str, where: str) -> Path:
    name = entry.removesuffix(".yaml")
    block_file = CONFIGS_DIR / f"{name}.yaml"
    if block_file.is_file():
        return block_file
    known = sorted(str(p.relative_to(CONFIGS_DIR).with_suffix("")) for p in CONFIGS_DIR.rglob("*.yaml"))
    section = name.split("/")[0]
    same_section = [k for k in known if k.startswith(f"{section}/")]
    close = difflib.get_close_matches(name, known, n=1, cutoff=0.5)
    hint = f"did you mean `{close[0]}`?" if close else f"building blocks: {', '.join(same_section or known)}"
    raise UserError(f"{where}: no building block `{entry}` (configs/{name}.yaml); {hint}")


def _first_nul(value: Any, path: KeyPath = ()) -> KeyPath | None:
    """The key path of the first string (key or value) holding a NUL, if any."""
    if isinstance(value, str):
        return path if "\0" in value else None
    children = (
        value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    )
    for key, child in children:
        if "\0" in str(key):
            return (*path, str(key))
        found = _first_nul(child, (*path, str(key)))
        if found is not None:
            return found
    return None


def _copy(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _copy(child) for key, child in value.items()}
    if isinstance(value, list):
        return [_copy(child) for child in value]
    return value
