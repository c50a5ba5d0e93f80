"""Stand-ins for modules an engine module imports at its top for what a run may never use: while
the engine module executes (`StandingIn.reading`), importing the module gives the stand-in, and what
is taken from it is `Deferred`; the module itself is imported where one of those is first used.
Standard library only: this runs in every rank before the training script imports anything."""

from __future__ import annotations

import contextlib
import importlib
import importlib.machinery
import importlib.util
import sys
import types
from collections.abc import Iterator
from typing import Any


def real_module(stub: types.ModuleType) -> types.ModuleType:
    """The module `stub` stands in for, imported the first time it is needed (then the one in
    sys.modules, as import gives it: transformers puts a lazy module of its own there). Where `stub`
    is in sys.modules, the module is executed from its file in its place, and where that fails
    `stub` stays."""
    fullname = stub.__name__
    loaded = sys.modules.get(fullname)
    if loaded is not None and loaded is not stub:
        return loaded
    if loaded is None:  # a stand-in whose readers are done: the import as usual
        return importlib.import_module(fullname)
    parent = fullname.rpartition(".")[0]
    where = sys.modules[parent].__path__ if parent else None
    spec = importlib.machinery.PathFinder.find_spec(fullname, where)
    real = importlib.util.module_from_spec(spec)
    sys.modules[fullname] = real
    try:
        spec.loader.exec_module(real)
    except BaseException:
        sys.modules[fullname] = stub
        raise
    return sys.modules[fullname]


def _attribute(found: Any, name: str) -> Any:
    """`found.name`; where `found` is a package without it, its submodule `name` (as `from package
    import submodule` gives)."""
    try:
        return getattr(found, name)
    except AttributeError:
        if not hasattr(found, "__path__"):
            raise
        return importlib.import_module(f"{found.__name__}.{name}")


class Deferred:
    """What an engine module took from a stand-in at its import: the module stood in for is imported,
    and the attribute read, on its first call, read or write."""

    def __init__(self, standing_in: StandingIn, path: tuple[str, ...]) -> None:
        object.__setattr__(self, "_standing_in", standing_in)
        object.__setattr__(self, "_path", path)

    def resolve(self) -> Any:
        """The attribute itself (its module imported, if it was not)."""
        found: Any = self._standing_in.real()
        for name in self._path:
            found = _attribute(found, name)
        return found

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        if self._standing_in.depth:
            return Deferred(self._standing_in, (*self._path, name))
        return getattr(self.resolve(), name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self.resolve(), name, value)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.resolve()(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<{'.'.join((self._standing_in.fullname, *self._path))}, not imported yet>"


class StandingIn:
    """A module standing in for module `fullname` while its readers execute: what they take from it
    at import is Deferred; what is read from it later comes from the module itself."""

    def __init__(self, fullname: str) -> None:
        self.fullname = fullname
        self.depth = 0
        self.module = types.ModuleType(fullname, f"stands in for {fullname} until it is used")
        self.module.__getattr__ = self._attribute  # type: ignore[attr-defined]

    def _attribute(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        if self.depth:
            return Deferred(self, (name,))
        return getattr(self.real(), name)

    def real(self) -> types.ModuleType:
        """The module itself, imported where it was not."""
        return real_module(self.module)

    @contextlib.contextmanager
    def reading(self) -> Iterator[None]:
        """While a reader executes: importing the module gives the stand-in (unless the module
        itself is imported already)."""
        if self.depth == 0 and self.fullname not in sys.modules:
            sys.modules[self.fullname] = self.module
        self.depth += 1
        try:
            yield
        finally:
            self.depth -= 1
            if self.depth == 0 and sys.modules.get(self.fullname) is self.module:
                del sys.modules[self.fullname]


def deferred_globals(module: types.ModuleType) -> dict[str, Deferred]:
    """The globals of `module` that are still Deferred."""
    return {name: value for name, value in vars(module).items() if isinstance(value, Deferred)}
