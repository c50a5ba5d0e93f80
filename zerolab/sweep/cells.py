"""A sweep's cells: the words of `zerolab sweep RECIPE WORD...` expanded into one list of
overrides per combination of swept values.

A word `key=v1,v2,...` whose value splits on top-level commas (outside quotes and brackets)
into two or more values is swept; any other `key=value` is a fixed override of every cell. A
cell's overrides are the words in the order given, each swept word replaced by one of its
values, so later words override earlier ones as in `zerolab launch`. Cells are the product of
the swept values, the first swept key varying slowest.

The comma rule: some single values contain commas (`data.split=98,2,0`). When the unsplit
text is itself a valid value of the key, the word is ambiguous and refused, with how to write
one value (`data.split='98,2,0'`) or several (`data.split='98,2,0','90,10,0'`).
"""

from __future__ import annotations

import hashlib
import itertools
import math
import re
from collections import Counter
from dataclasses import dataclass
from typing import Any

from zerolab import rundir
from zerolab.errors import UserError
from zerolab.recipe.compose import override_problem, resolve_recipe_path
from zerolab.recipe.yaml_io import parse_yaml
from zerolab.sweep.values import value_text

_OPENING = {"[": "]", "{": "}", "(": ")"}
_UNSAFE = re.compile(r"[^A-Za-z0-9.,+-]+")
MAX_NAME = 100
"""Longer cell and sweep names are cut and end in a hash of what they name."""


@dataclass(frozen=True)
class Swept:
    """A swept key: its values as given (YAML text) and as read (JSON-ready)."""

    key: str
    texts: tuple[str, ...]
    values: tuple[Any, ...]


@dataclass(frozen=True)
class Cell:
    """One combination of swept values: its name (a directory name), its overrides (the words
    of the command with one value per swept key), and each swept key's value (as read)."""

    name: str
    overrides: tuple[str, ...]
    values: dict[str, Any]


@dataclass(frozen=True)
class Sweep:
    """A sweep command: the recipe, its words, the swept keys, the fixed overrides, the cells."""

    recipe: str
    words: tuple[str, ...]
    swept: tuple[Swept, ...]
    fixed: tuple[str, ...]
    cells: tuple[Cell, ...]

    @property
    def keys(self) -> tuple[str, ...]:
        """The swept keys, in the order given."""
        return tuple(swept.key for swept in self.swept)

    def default_name(self) -> str:
        """The sweep's name when none is given: the recipe's name and the swept keys."""
        return default_name(self.recipe, self.keys, self.words)


def default_name(recipe: str, keys: tuple[str, ...], words: tuple[str, ...]) -> str:
    """A sweep's name when none is given: the recipe's name (a run's recipe.yaml: the run directory's
    name, `-resumed`) and the swept keys."""
    path = resolve_recipe_path(recipe)
    stem = f"{path.parent.name}-resumed" if rundir.is_run_dir(path.parent) else path.stem
    return safe_name("-".join([stem, *keys]), digest_of=recipe + " " + " ".join(words))


def split_values(text: str) -> list[str]:
    """`text` split on its top-level commas: those outside quotes ('...', "...") and brackets
    ([...], {...}, (...)). Text with an unclosed quote or bracket is one value."""
    pieces: list[str] = []
    closing: list[str] = []
    quote: str | None = None
    start = 0
    escaped = False
    for index, char in enumerate(text):
        if quote:
            if escaped:
                escaped = False
            elif char == "\\" and quote == '"':
                escaped = True
            elif char == quote:
                quote = None
        elif char in "'\"":
            quote = char
        elif char in _OPENING:
            closing.append(_OPENING[char])
        elif closing and char == closing[-1]:
            closing.pop()
        elif char == "," and not closing:
            pieces.append(text[start:index])
            start = index + 1
    if quote or closing:
        return [text]
    return [*pieces, text[start:]]


@dataclass(frozen=True)
class Words:
    """A sweep command's words, read and checked, before its cells are made: the recipe, the words,
    the swept keys by their word's position, the fixed overrides; `count`, how many cells."""

    recipe: str
    words: tuple[str, ...]
    swept: dict[int, Swept]
    fixed: tuple[str, ...]

    @property
    def keys(self) -> tuple[str, ...]:
        """The swept keys, in the order given."""
        return tuple(entry.key for entry in self.swept.values())

    @property
    def count(self) -> int:
        """The number of cells: the product of the swept keys' value counts."""
        return math.prod(len(entry.texts) for entry in self.swept.values())

    def default_name(self) -> str:
        """The sweep's name when none is given: the recipe's name and the swept keys."""
        return default_name(self.recipe, self.keys, self.words)


def expand(recipe: str, words: list[str]) -> Sweep:
    """The sweep of `recipe` with `words`; UserError for a word that is ambiguous, a value that
    is not valid for its key on its own, a key swept twice, or no swept key at all."""
    return cells_of(read_words(recipe, words))


def read_words(recipe: str, words: list[str]) -> Words:
    """The words of a sweep of `recipe`, read and checked (as `expand` refuses them), its cells not
    made yet: how many there are is known at once."""
    resolve_recipe_path(recipe)  # a recipe that does not exist is named before anything else
    swept: dict[int, Swept] = {}
    for position, word in enumerate(words):
        key, sep, text = word.partition("=")
        pieces = split_values(text) if sep else [text]
        if len(pieces) < 2:
            continue
        key = key.strip()
        _refuse_ambiguous(word, key, pieces)
        if any(other.key == key for other in swept.values()):
            raise UserError(f"`{key}` is swept twice; give all its values in one word: {key}=A,B,C")
        values = tuple(_value(word, key, piece) for piece in pieces)
        texts = [value_text(value) for value in values]
        twice = [text for text in dict.fromkeys(texts) if texts.count(text) > 1]
        if twice:
            raise UserError(f"`{word}`: the value `{twice[0]}` is given twice; give each value once")
        swept[position] = Swept(key, tuple(pieces), values)
    if not swept:
        raise UserError(
            "nothing to sweep: give at least one KEY=V1,V2,... (e.g. zero=z0,z1,z2 or "
            "train.micro_batch_size=1,2,4); KEY=VALUE words are fixed overrides of every cell"
        )
    fixed = tuple(word for position, word in enumerate(words) if position not in swept)
    keys = {entry.key for entry in swept.values()}
    for word in fixed:
        if word.partition("=")[0].strip() in keys:
            raise UserError(f"`{word}`: `{word.partition('=')[0].strip()}` is swept; give it once")
        problem = override_problem(word)
        if problem is not None:
            raise UserError(problem)
    return Words(recipe, tuple(words), swept, fixed)


def cells_of(read: Words) -> Sweep:
    """The sweep of words read: one cell per combination of the swept values, the first swept key
    varying slowest."""
    swept, words = read.swept, read.words
    cells = []
    order = list(swept)
    for choice in itertools.product(*(range(len(swept[position].texts)) for position in order)):
        picked = dict(zip(order, choice, strict=True))
        overrides = tuple(
            f"{swept[position].key}={swept[position].texts[picked[position]]}" if position in swept else word
            for position, word in enumerate(words)
        )
        values = {swept[position].key: swept[position].values[picked[position]] for position in order}
        cells.append(Cell(_cell_name(values, overrides), overrides, values))
    _make_unique(cells)
    return Sweep(read.recipe, words, tuple(swept[position] for position in order), read.fixed, tuple(cells))


def _refuse_ambiguous(word: str, key: str, pieces: list[str]) -> None:
    if override_problem(word) is not None:
        return
    text = word.partition("=")[2]
    several = ",".join(f"'{piece}'" for piece in pieces)
    raise UserError(
        f"`{word}` is ambiguous: `{text}` is one valid value of `{key}`, and also {len(pieces)} values "
        f"split at the commas. Quote each value: one value as \"{key}='{text}'\", several as "
        f"\"{key}={several}\" (or \"{key}='{text}','ANOTHER'\"); the double quotes keep the single "
        "quotes from the shell"
    )


def _value(word: str, key: str, piece: str) -> Any:
    """The value `piece` of the swept word, as read; UserError when it is not valid for `key`."""
    if not piece.strip():
        raise UserError(f"`{word}`: an empty value between commas; give each value of `{key}`")
    problem = override_problem(f"{key}={piece}")
    if problem is not None:
        raise UserError(f"`{word}`: the value `{piece}` is not valid for `{key}`:\n{problem}")
    value = parse_yaml(piece, f"override `{key}={piece}`", numbered=False)
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return piece.strip()  # a list or mapping, shown as given


def check_name(name: str) -> str:
    """A sweep name given with --name; UserError unless it is a plain directory name."""
    if not name or _UNSAFE.sub("_", name) != name or name.startswith(".") or len(name) > MAX_NAME:
        raise UserError(
            f"--name {name!r}: use a plain directory name of letters, digits and . , + - _ "
            f"(not starting with a dot, at most {MAX_NAME} characters)"
        )
    return name


def safe_name(text: str, *, digest_of: str) -> str:
    """`text` as a directory name: characters other than letters, digits and `.,+-` as `_`; a
    long name cut, ending in a hash of `digest_of`."""
    name = _UNSAFE.sub("_", text).strip("_.") or "cell"
    if len(name) > MAX_NAME:
        name = f"{name[: MAX_NAME - 9]}-{_digest(digest_of)}"
    return name


def _cell_name(values: dict[str, Any], overrides: tuple[str, ...]) -> str:
    """`zero-z1_train.micro_batch_size-2`: each swept key and its value."""
    return safe_name(
        "_".join(f"{key}-{_UNSAFE.sub('_', value_text(value)).strip('_')}" for key, value in values.items()),
        digest_of=" ".join(overrides),
    )


def _make_unique(cells: list[Cell]) -> None:
    """Cells whose names coincide (values that differ only in unsafe characters) end in a hash."""
    counts = Counter(cell.name.lower() for cell in cells)
    for index, cell in enumerate(cells):
        if counts[cell.name.lower()] > 1:
            name = f"{cell.name[: MAX_NAME - 9]}-{_digest(' '.join(cell.overrides))}"
            cells[index] = Cell(name, cell.overrides, cell.values)


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:8]
