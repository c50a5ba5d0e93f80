"""YAML in and out for recipes: numbers written like `6e-4` are read as numbers.

PyYAML follows YAML 1.1, whose float pattern needs a dot (`6.0e-4`), so `6e-4` and
`1e5` come back as strings. The loader here adds the YAML 1.2 float pattern.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from zerolab.errors import UserError

_FLOAT_1_2 = re.compile(
    r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
    |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
    |\.[0-9_]+(?:[eE][-+]?[0-9]+)?
    |[-+]?\.(?:inf|Inf|INF)
    |\.(?:nan|NaN|NAN))$""",
    re.VERBOSE,
)


class RecipeLoader(yaml.SafeLoader):
    """SafeLoader that also reads `6e-4`-style scalars as floats."""


RecipeLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:float"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
RecipeLoader.add_implicit_resolver("tag:yaml.org,2002:float", _FLOAT_1_2, list("-+0123456789."))


def parse_yaml(text: str, source: str, *, numbered: bool = True) -> Any:
    """Parse YAML text. A syntax error, or a key given twice in one mapping (which YAML would
    let the last one win silently), is a UserError naming `source` and, when `numbered` (a
    file, not a one-line override), the line."""
    try:
        loader = RecipeLoader(text)
        try:
            node = loader.get_single_node()
            if node is None:
                return None
            _refuse_duplicate_keys(node, source, numbered)
            return loader.construct_document(node)
        finally:
            loader.dispose()
    except yaml.YAMLError as error:
        raise UserError(_syntax_error(error, text, source, numbered)) from None


def read_yaml_mapping(path: Path) -> dict[str, Any]:
    """Read a YAML file that must hold a mapping (an empty file is an empty mapping)."""
    try:
        data = path.read_bytes()
    except OSError as error:
        raise UserError(f"{path}: cannot read: {error.strerror}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data.count(b"\n", 0, error.start) + 1
        column = error.start - (data.rfind(b"\n", 0, error.start) + 1) + 1
        raise UserError(
            f"{path}: not UTF-8: byte 0x{data[error.start]:02x} at offset {error.start} "
            f"(line {line}, column {column}); save it as UTF-8"
        ) from None
    parsed = parse_yaml(text, str(path))
    if parsed is None:
        return {}
    if not isinstance(parsed, dict):
        raise UserError(f"{path}: a recipe file holds a mapping of keys, not a {type(parsed).__name__}")
    return parsed


def _syntax_error(error: yaml.YAMLError, text: str, source: str, numbered: bool) -> str:
    """`source:LINE: not valid YAML: ...` at the line PyYAML means. A bracket, brace or quote
    left open is reported where it opens: PyYAML's problem mark is then the end of the text,
    past the last line, and its context mark is the opening character."""
    if isinstance(error, yaml.reader.ReaderError):  # a character YAML does not allow
        mark = _mark_at(text, error.position)
        return (
            f"{_where(source, mark, numbered)}: not valid YAML: unacceptable character "
            f"#x{error.character:04x} at {_position(mark, numbered)}; remove it"
        )
    problem = getattr(error, "problem", None) or str(error)
    problem_mark = getattr(error, "problem_mark", None)
    context_mark = getattr(error, "context_mark", None)
    if problem_mark is None:
        return f"{source}: not valid YAML: {problem}"
    opening = _opening(text, context_mark)
    if opening and problem_mark.index >= len(text.rstrip()):
        return (
            f"{_where(source, context_mark, numbered)}: not valid YAML: the `{opening}` at "
            f"{_position(context_mark, numbered)} is never closed ({problem}); close it"
        )
    mark = _mark_at(text, min(problem_mark.index, len(text.rstrip()) - 1))  # within the text
    detail = f"{problem}, at {_position(mark, numbered)}"
    context = getattr(error, "context", None)
    if context and context_mark is not None:
        opened = f" from the `{opening}`" if opening else ""
        detail += f" ({context}{opened} at {_position(context_mark, numbered)})"
    return (
        f"{_where(source, mark, numbered)}: not valid YAML: {detail}; fix the syntax there "
        "(indentation with spaces, `key: value`, brackets and quotes closed)"
    )


def _mark_at(text: str, index: int) -> yaml.Mark:
    index = max(index, 0)
    line = text.count("\n", 0, index)
    return yaml.Mark("", index, line, index - (text.rfind("\n", 0, index) + 1), None, None)


def _opening(text: str, mark: yaml.Mark | None) -> str | None:
    """The bracket, brace or quote at `mark`, if that is what it points at."""
    character = text[mark.index : mark.index + 1] if mark is not None else ""
    return character if character and character in "[{\"'" else None


def _where(source: str, mark: yaml.Mark, numbered: bool) -> str:
    return f"{source}:{mark.line + 1}" if numbered else source


def _position(mark: yaml.Mark, numbered: bool) -> str:
    return f"line {mark.line + 1}, column {mark.column + 1}" if numbered else f"column {mark.column + 1}"


def _refuse_duplicate_keys(node: yaml.Node, source: str, numbered: bool) -> None:
    """UserError listing every key given twice in one mapping, anywhere in the document (and
    refusing an alias inside its own anchor: a recipe is a tree)."""
    found: list[tuple[int, str]] = []
    walked: set[int] = set()

    def walk(current: yaml.Node, path: tuple[str, ...], ancestors: frozenset[int]) -> None:
        if id(current) in ancestors:
            where = f"{source}:{current.start_mark.line + 1}" if numbered else source
            raise UserError(
                f"{where}: `{'.'.join(path)}` contains itself (an alias inside its own anchor); "
                "a recipe is a tree: remove the alias"
            )
        if id(current) in walked:  # an alias of a node already walked
            return
        walked.add(id(current))
        inside = ancestors | {id(current)}
        if isinstance(current, yaml.SequenceNode):
            for index, item in enumerate(current.value):
                walk(item, (*path, str(index)), inside)
        elif isinstance(current, yaml.MappingNode):
            seen: dict[str, yaml.Mark] = {}
            for key_node, value_node in current.value:
                key = str(key_node.value)
                if isinstance(key_node, yaml.ScalarNode) and key_node.tag != "tag:yaml.org,2002:merge":
                    if key in seen:
                        first, second = seen[key], key_node.start_mark
                        found.append((second.index, _twice(source, (*path, key), first, second, numbered)))
                    seen[key] = key_node.start_mark
                walk(value_node, (*path, key), inside)

    walk(node, (), frozenset())
    if found:
        raise UserError("\n".join(message for _, message in sorted(found)))


def _twice(source: str, path: tuple[str, ...], first: yaml.Mark, second: yaml.Mark, numbered: bool) -> str:
    key = ".".join(path)
    if not numbered:
        return f"{source}: `{key}` is given twice; YAML would keep only the last one: keep one"
    return (
        f"{source}:{second.line + 1}: `{key}` is given twice (lines {first.line + 1} and "
        f"{second.line + 1}); YAML would keep only the last one: keep one"
    )


class RecipeDumper(yaml.SafeDumper):
    """SafeDumper that quotes the strings RecipeLoader would read as floats (`'1e-5'`)."""


def _represent_str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "'" if _FLOAT_1_2.match(value) else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


RecipeDumper.add_representer(str, _represent_str)


def dump_yaml(data: Any, width: int = 100) -> str:
    """Block-style YAML that keeps the key order and reads back as it was (RecipeLoader)."""
    return yaml.dump(data, Dumper=RecipeDumper, sort_keys=False, default_flow_style=False, width=width)
