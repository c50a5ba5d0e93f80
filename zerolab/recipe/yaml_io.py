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


def parse_yaml(text: str, source: str) -> Any:
    """Parse YAML text; a syntax error names `source` and the line."""
    try:
        return yaml.load(text, Loader=RecipeLoader)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f"{source}:{mark.line + 1}" if mark else source
        problem = getattr(error, "problem", None) or str(error)
        raise UserError(f"{where}: not valid YAML: {problem}") from None


def read_yaml_mapping(path: Path) -> dict[str, Any]:
    """Read a YAML file that must hold a mapping (an empty file is an empty mapping)."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise UserError(f"{path}: cannot read: {error.strerror}") from None
    data = parse_yaml(text, str(path))
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise UserError(f"{path}: a recipe file holds a mapping of keys, not a {type(data).__name__}")
    return data


def dump_yaml(data: Any) -> str:
    """Block-style YAML that keeps the key order."""
    return yaml.safe_dump(data, sort_keys=False, default_flow_style=False, width=100)
